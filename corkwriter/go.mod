module github.com/hotpath-go/hotpath/corkwriter

go 1.26
