package dictionary_test

import (
	"bytes"
	"fmt"

	"github.com/hotpath-go/hotpath/dictionary"
)

func Example() {
	// What a router knows: names, and a template of one message type.
	src := dictionary.Source{
		Methods: dictionary.Entries("room/join", "room/send"),
		Events:  dictionary.Entries("room/message"),
		Fields:  dictionary.Entries("roomId", "message", "id", "author", "text"),
		Templates: dictionary.Entries(
			`{"roomId":"","message":{"id":"","author":{"id":""},"text":""}}`),
	}
	d, err := dictionary.Build(src, dictionary.BuildOptions{})
	if err != nil {
		panic(err)
	}
	withDict := dictionary.NewDeflate(d, dictionary.CodecOptions{})
	without := dictionary.NewDeflate(nil, dictionary.CodecOptions{})

	msg := []byte(`{"roomId":"r-4821","message":{"id":"m-99120","author":{"id":"u-17"},"text":"see you at six"}}`)
	small, ok := withDict.AppendCompress(nil, msg)
	if !ok {
		panic("not compressed")
	}
	plain, _ := without.AppendCompress(nil, msg)
	back, err := withDict.AppendDecompress(nil, small)
	if err != nil {
		panic(err)
	}
	fmt.Println("id:", d.ID())
	fmt.Println("message:", len(msg), "bytes")
	fmt.Println("without dictionary:", len(plain), "bytes")
	fmt.Println("with dictionary:", len(small), "bytes")
	fmt.Println("round trip:", bytes.Equal(back, msg))
	// Output:
	// id: 5e4f05e6b7421936
	// message: 93 bytes
	// without dictionary: 85 bytes
	// with dictionary: 45 bytes
	// round trip: true
}
