module topolet.invalid/hack/bench/sched-ancestor

go 1.24.0
