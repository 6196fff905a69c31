module topolet.invalid/hack/bench/colocation

go 1.24.0
