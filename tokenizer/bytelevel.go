package tokenizer

// GPT-2's byte-level alphabet: every byte is shown as a printable rune so that BPE vocabularies can
// be stored as text. Printable Latin-1 bytes stand for themselves; the other 68 bytes are shifted to
// U+0100 onwards, in byte order. tokenizer.json vocabularies are written in this alphabet; the
// encoder works on raw bytes, so vocabulary entries are mapped back through byteOfRune.

// runeOfByte[b] is the rune that stands for byte b.
var runeOfByte = func() [256]rune {
	var t [256]rune
	n := rune(0)
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			t[b] = rune(b)
			continue
		}
		t[b] = 0x100 + n
		n++
	}
	return t
}()

// byteOfRune inverts runeOfByte.
var byteOfRune = func() map[rune]byte {
	m := make(map[rune]byte, 256)
	for b, r := range runeOfByte {
		m[r] = byte(b)
	}
	return m
}()

// decodeByteLevel maps a vocabulary entry written in the byte-level alphabet back to its bytes.
// ok is false when the entry holds a rune outside the alphabet: such an entry (typically an added
// token stored in the vocab) can never come out of byte-level BPE, only from added-token matching.
func decodeByteLevel(s string) (b []byte, ok bool) {
	b = make([]byte, 0, len(s))
	for _, r := range s {
		c, found := byteOfRune[r]
		if !found {
			return nil, false
		}
		b = append(b, c)
	}
	return b, true
}
