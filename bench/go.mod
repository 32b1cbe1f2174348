module github.com/hotpath-go/hotpath/bench

go 1.26
