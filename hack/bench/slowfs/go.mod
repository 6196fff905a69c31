module topolet.invalid/hack/bench/slowfs

go 1.24.0

require github.com/hanwen/go-fuse/v2 v2.7.2

require golang.org/x/sys v0.0.0-20220520151302-bc2c85ada10a // indirect
