module github.com/hotpath-go/hotpath/scheduler

go 1.26
