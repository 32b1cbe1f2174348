package dictionary

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// The test router: a small chat server with rooms and presence, 15 methods
// and 6 events, whose packets are a binary envelope (kind byte, method-name
// length, method name) followed by JSON. The benchmark messages are built
// from it, and so are the samples that Build may learn from, from another
// random stream.

const (
	kindCall   = 1
	kindResult = 2
	kindEvent  = 4
)

type author struct {
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	Avatar string `json:"avatar,omitempty"`
}

type reaction struct {
	Emoji string `json:"emoji"`
	Count int    `json:"count"`
}

type chatMessage struct {
	ID        string     `json:"id"`
	Author    author     `json:"author"`
	Text      string     `json:"text"`
	TS        int64      `json:"ts"`
	ReplyTo   string     `json:"replyTo,omitempty"`
	Reactions []reaction `json:"reactions,omitempty"`
	Edited    bool       `json:"edited,omitempty"`
}

type roomMessageEvent struct {
	RoomID  string      `json:"roomId"`
	Message chatMessage `json:"message"`
}

type sendParams struct {
	RoomID  string `json:"roomId"`
	Text    string `json:"text"`
	ReplyTo string `json:"replyTo"`
}

type historyResult struct {
	Messages []chatMessage `json:"messages"`
	Cursor   string        `json:"cursor"`
	More     bool          `json:"more"`
}

type member struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Status   string `json:"status"`
	LastSeen int64  `json:"lastSeen"`
	Role     string `json:"role"`
	Avatar   string `json:"avatar"`
}

type membersResult struct {
	Members []member `json:"members"`
	Count   int      `json:"count"`
	RoomID  string   `json:"roomId"`
}

type presenceEvent struct {
	UserID   string `json:"userId"`
	Status   string `json:"status"`
	LastSeen int64  `json:"lastSeen"`
}

var (
	testMethods = []string{"auth/login", "auth/refresh", "room/join", "room/leave", "room/send", "room/history", "room/members", "user/profile", "user/presence", "user/search", "chat/typing", "chat/react", "file/upload", "file/list", "session/ping"}
	testEvents  = []string{"room/message", "room/joined", "room/left", "user/presence", "chat/typing", "chat/reaction"}
	testFields  = []string{"id", "roomId", "userId", "message", "messages", "author", "name", "avatar", "text", "ts", "replyTo", "reactions", "emoji", "count", "edited", "cursor", "more", "members", "status", "lastSeen", "role", "limit", "before", "token", "expiresAt", "typing", "query", "mime", "size", "url", "error", "code", "data"}
)

func envelope(kind byte, method string, body any) []byte {
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	out := []byte{kind, byte(len(method))}
	out = append(out, method...)
	return append(out, b...)
}

// testSource is what compat's Router would hand to Build: names, the
// envelope's skeletons, and templates (zero values of the types, each in its
// envelope).
func testSource() Source {
	var skeletons []Entry
	for _, k := range []byte{kindCall, kindResult, kindEvent} {
		skeletons = append(skeletons, Entry{Text: string([]byte{k})})
	}
	tpl := func(kind byte, method string, v any) Entry {
		return Entry{Text: string(envelope(kind, method, v))}
	}
	return Source{
		Methods:   Entries(testMethods...),
		Events:    Entries(testEvents...),
		Fields:    Entries(testFields...),
		Skeletons: skeletons,
		Templates: []Entry{
			tpl(kindEvent, "room/message", roomMessageEvent{}),
			tpl(kindEvent, "user/presence", presenceEvent{}),
			tpl(kindCall, "room/send", sendParams{}),
			tpl(kindResult, "", historyResult{Messages: []chatMessage{{Reactions: []reaction{{}}}}}),
			tpl(kindResult, "", membersResult{Members: []member{{}}}),
		},
	}
}

var (
	words    = strings.Fields("hello there ready ship it today review the build is green lunch at noon ok thanks merge after tests deploy done looks good to me on my way")
	names    = strings.Fields("ada linus grace ken rob barbara edsger donald margaret dennis frances john")
	statuses = []string{"online", "away", "offline", "busy"}
	roles    = []string{"member", "owner", "moderator"}
)

func sentence(r *rand.Rand, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = words[r.IntN(len(words))]
	}
	return strings.Join(parts, " ")
}

// eventMessage is the 108-byte room/message event.
func eventMessage() []byte {
	return envelope(kindEvent, "room/message", roomMessageEvent{"r-4", chatMessage{ID: "m-9", Author: author{ID: "u-17"}, Text: "hi all", TS: 1764680000}})
}

// callMessage is the 84-byte room/send call.
func callMessage() []byte {
	return envelope(kindCall, "room/send", sendParams{"r-4821", "on my way, see you at 6p", "m-99117"})
}

func historyOf(r *rand.Rand, n int) historyResult {
	msgs := make([]chatMessage, n)
	for i := range msgs {
		msgs[i] = chatMessage{
			ID:     fmt.Sprintf("m-%d", 99000+i*7+r.IntN(7)),
			Author: author{ID: fmt.Sprintf("u-%d", r.IntN(90)), Name: names[r.IntN(len(names))]},
			Text:   sentence(r, 3+r.IntN(6)),
			TS:     1764680000 + int64(i*37+r.IntN(37)),
		}
		if r.IntN(3) == 0 {
			msgs[i].Reactions = []reaction{{Emoji: ":+1:", Count: 1 + r.IntN(4)}}
		}
	}
	return historyResult{Messages: msgs, Cursor: fmt.Sprintf("c-%d", r.IntN(9999)), More: true}
}

// historyAnswer is the 1.1 KB room/history answer.
func historyAnswer() []byte {
	return envelope(kindResult, "", historyOf(rand.New(rand.NewPCG(1, 2)), 9))
}

func membersOf(r *rand.Rand, n int) membersResult {
	ms := make([]member, n)
	for i := range ms {
		ms[i] = member{
			ID:       fmt.Sprintf("u-%d", 1000+r.IntN(9000)),
			Name:     fmt.Sprintf("%s%d", names[r.IntN(len(names))], r.IntN(100)),
			Status:   statuses[r.IntN(len(statuses))],
			LastSeen: 1764600000 + int64(r.IntN(80000)),
			Role:     roles[r.IntN(len(roles))],
			Avatar:   fmt.Sprintf("https://cdn.example.com/a/%08x.png", r.Uint32()),
		}
	}
	return membersResult{Members: ms, Count: n, RoomID: fmt.Sprintf("r-%d", r.IntN(9999))}
}

// membersAnswer is the 27 KB room/members answer.
func membersAnswer() []byte {
	return envelope(kindResult, "", membersOf(rand.New(rand.NewPCG(3, 4)), 195))
}

// routerSamples returns n messages of the router's kinds, drawn from a
// random stream that the benchmark messages do not use.
func routerSamples(seed uint64, n int) [][]byte {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([][]byte, n)
	for i := range out {
		switch r.IntN(5) {
		case 0, 1:
			out[i] = envelope(kindEvent, "room/message", roomMessageEvent{
				RoomID:  fmt.Sprintf("r-%d", r.IntN(999)),
				Message: chatMessage{ID: fmt.Sprintf("m-%d", r.IntN(99999)), Author: author{ID: fmt.Sprintf("u-%d", r.IntN(99))}, Text: sentence(r, 1+r.IntN(5)), TS: 1764000000 + r.Int64N(999999)},
			})
		case 2:
			out[i] = envelope(kindCall, "room/send", sendParams{fmt.Sprintf("r-%d", r.IntN(9999)), sentence(r, 2+r.IntN(5)), fmt.Sprintf("m-%d", r.IntN(99999))})
		case 3:
			out[i] = envelope(kindResult, "", historyOf(r, 1+r.IntN(4)))
		case 4:
			out[i] = envelope(kindResult, "", membersOf(r, 1+r.IntN(4)))
		}
	}
	return out
}
