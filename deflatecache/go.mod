module github.com/hotpath-go/hotpath/deflatecache

go 1.26

require github.com/hotpath-go/hotpath/wsframe v0.0.0-00010101000000-000000000000

require github.com/klauspost/compress v1.20.4

replace github.com/hotpath-go/hotpath/wsframe => ../wsframe
