package main

import "fmt"

func main() {
	fmt.Println("bench: no scenarios registered")
}
