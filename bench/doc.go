// Command bench measures every hotpath piece side by side with the libraries
// people would otherwise pick (gorilla/websocket, lxzan/gws, gobwas/ws,
// coder/websocket, lesismal/nbio) in one process and one run, and reports
// ratios.
//
//	go run ./bench [-only PATTERN] [-quick] [-count N] [-save]
package main
