module github.com/hotpath-go/hotpath/compat

go 1.26
