module github.com/hotpath-go/hotpath/dictionary

go 1.26

require github.com/klauspost/compress v1.20.4
