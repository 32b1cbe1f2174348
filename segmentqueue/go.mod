module github.com/hotpath-go/hotpath/segmentqueue

go 1.26
