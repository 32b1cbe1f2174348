package main

import "fmt"

func main() {
	fmt.Println("fuzz: runner not built yet; run go test -fuzz in a module")
}
