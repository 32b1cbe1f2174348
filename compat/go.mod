module github.com/hotpath-go/hotpath/compat

go 1.26

require github.com/hotpath-go/hotpath/dispatch v0.0.0-00010101000000-000000000000

replace github.com/hotpath-go/hotpath/dispatch => ../dispatch
