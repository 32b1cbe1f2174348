module github.com/hotpath-go/hotpath/deflatecache

go 1.26
