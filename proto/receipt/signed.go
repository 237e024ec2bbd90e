package receipt

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
)

// Signed receipts: with authentication on, the proxy hands clients a
// receipt wrapped with the topic it was delivered from and a MAC under a
// cluster receipt key, and unwraps it (refusing any receipt whose MAC does
// not verify) before it reaches a broker. Layout, base64url without
// padding:
//
//	0x02 | key id (4 bytes, big endian) | uvarint len(topic) | topic |
//	the plain receipt's bytes | MAC (16 bytes)
//
// where MAC is HMAC-SHA256 under the key over everything before it,
// truncated to 16 bytes. A plain receipt starts with 0x01, so the two
// never parse as each other.

const signedVersion = 2

// MACBytes is the length of a signed receipt's MAC.
const MACBytes = 16

// ErrBadMAC is returned for a signed receipt whose MAC does not verify
// under its key, or whose key is no longer live.
var ErrBadMAC = errors.New("receipt: signature does not verify")

// maxTopicBytes bounds the topic inside a signed receipt.
const maxTopicBytes = 1024

// Sign wraps the plain receipt plain (as String made it) with topic under
// key keyID.
func Sign(plain, topic string, keyID uint32, key []byte) (string, error) {
	inner, err := base64.RawURLEncoding.DecodeString(plain)
	if err != nil || len(inner) == 0 || inner[0] != version {
		return "", fmt.Errorf("%w: not a plain receipt", ErrMalformed)
	}
	buf := make([]byte, 0, 1+4+binary.MaxVarintLen32+len(topic)+len(inner)+MACBytes)
	buf = append(buf, signedVersion)
	buf = binary.BigEndian.AppendUint32(buf, keyID)
	buf = binary.AppendUvarint(buf, uint64(len(topic)))
	buf = append(buf, topic...)
	buf = append(buf, inner...)
	buf = append(buf, mac(key, buf)...)
	return base64.RawURLEncoding.EncodeToString(buf), nil
}

func mac(key, b []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(b)
	return h.Sum(nil)[:MACBytes]
}

// Verify checks a signed receipt against the key key(id) answers (nil: no
// such live key) and answers the plain receipt and its topic.
func Verify(signed string, key func(id uint32) []byte) (plain, topic string, err error) {
	buf, err := base64.RawURLEncoding.DecodeString(signed)
	if err != nil {
		return "", "", fmt.Errorf("%w: receipt is not base64", ErrMalformed)
	}
	if len(buf) < 1+4+1+MACBytes || buf[0] != signedVersion {
		return "", "", fmt.Errorf("%w: not a signed receipt", ErrMalformed)
	}
	body, sum := buf[:len(buf)-MACBytes], buf[len(buf)-MACBytes:]
	k := key(binary.BigEndian.Uint32(body[1:5]))
	if k == nil || !hmac.Equal(mac(k, body), sum) {
		return "", "", ErrBadMAC
	}
	n, w := binary.Uvarint(body[5:])
	if w <= 0 || n > maxTopicBytes || uint64(len(body)-5-w) < n {
		return "", "", fmt.Errorf("%w: signed receipt topic", ErrMalformed)
	}
	rest := body[5+w:]
	topic, inner := string(rest[:n]), rest[n:]
	plain = base64.RawURLEncoding.EncodeToString(inner)
	if _, err := Parse(plain); err != nil {
		return "", "", err
	}
	return plain, topic, nil
}
