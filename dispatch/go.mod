module github.com/hotpath-go/hotpath/dispatch

go 1.26
