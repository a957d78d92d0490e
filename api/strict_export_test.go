package api

import "bytes"

// hostileBodies are the bodies of issue 19, each 1 MiB: 131,063 distinct
// 3-character keys (quadratic to check pairwise), and nesting (a recursion
// per level).
func hostileBodies() map[string][]byte {
	var keys bytes.Buffer
	keys.WriteByte('{')
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	for i := 0; keys.Len() < MaxBodyBytes-10; i++ {
		if i > 0 {
			keys.WriteByte(',')
		}
		keys.WriteString(`"` + string(alphabet[i%62]) + string(alphabet[i/62%62]) + string(alphabet[i/62/62%62]) + `":1`)
	}
	keys.WriteByte('}')
	prefix := `{"user_id":`
	return map[string][]byte{
		"131,000 keys":     keys.Bytes(),
		"1 MiB of [":       bytes.Repeat([]byte("["), MaxBodyBytes),
		"1 MiB of [ in {}": append([]byte(prefix), bytes.Repeat([]byte("["), MaxBodyBytes-len(prefix))...),
		"1 MiB of {":       append([]byte(prefix), bytes.Repeat([]byte(`{"a":`), (MaxBodyBytes-len(prefix))/5)...),
	}
}

// HostileBodies exposes hostileBodies to the external tests, which send
// them to a server.
var HostileBodies = hostileBodies
