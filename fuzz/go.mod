module github.com/hotpath-go/hotpath/fuzz

go 1.26
