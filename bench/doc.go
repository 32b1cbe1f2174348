// Command bench measures every hotpath piece side by side with the libraries
// people would otherwise pick (gorilla/websocket, lxzan/gws, gobwas/ws,
// coder/websocket, lesismal/nbio) in one process and one run, and reports
// ratios.
//
//	go run ./bench [-only PATTERN] [-quick] [-count N] [-save] [-json]
//	               [-baseline FILE] [-tolerance F] [-list] [-render FILE]
//
// A scenario is a file whose init registers it (see Scenario in runner.go);
// the runner opens every row of a case, runs one warm-up trial per row and
// then -count interleaved rounds, and prints a markdown table per scenario
// whose footer names the machine, the Go version, the load and the command.
// -save writes the tables, an SVG chart per scenario and every trial as
// JSON under bench/results/, and rewrites the generated section of
// bench/README.md from them; -render rebuilds all of that from a saved
// JSON file. -baseline compares a run with a saved one, dividing out the
// peers' own drift so that a busy machine is not read as a regression.
package main
