module github.com/hotpath-go/hotpath/wsframe

go 1.26
