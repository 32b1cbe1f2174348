module github.com/hotpath-go/hotpath/dictionary

go 1.26
