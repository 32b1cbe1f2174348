module github.com/hotpath-go/hotpath/emitter

go 1.26
