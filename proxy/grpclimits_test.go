package proxy

import (
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The gRPC listener advertises its stream and metadata limits, and a
// client that opens more streams on one connection than allowed (as a
// hostile one would; grpc-go clients queue instead) has the extra ones
// refused with REFUSED_STREAM.
func TestGRPCStreamsPerConnectionAreBounded(t *testing.T) {
	const maxStreams = 3
	srv, _, _ := startClusterWith(t, nil, func(c *Config) { c.ListenLimits.GRPCMaxConcurrentStreams = maxStreams })
	c, err := net.Dial("tcp", srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a hang guard
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var settings map[http2.SettingID]uint32
	for settings == nil {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			settings = map[http2.SettingID]uint32{}
			_ = sf.ForeachSetting(func(s http2.Setting) error { settings[s.ID] = s.Val; return nil })
		}
	}
	if got := settings[http2.SettingMaxConcurrentStreams]; got != maxStreams {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want %d", got, maxStreams)
	}
	if got := settings[http2.SettingMaxHeaderListSize]; got != DefaultListenLimits().GRPCMaxHeaderListBytes {
		t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE = %d, want %d", got, DefaultListenLimits().GRPCMaxHeaderListBytes)
	}
	if err := fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/sundial.v1.Consumer/Subscribe"}, {Name: ":authority", Value: srv.GRPCAddr()},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		_ = enc.WriteField(f)
	}
	for i := range maxStreams + 1 {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	extra := uint32(2*maxStreams + 1)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no refusal of stream %d: %v", extra, err)
		}
		rst, ok := f.(*http2.RSTStreamFrame)
		if !ok {
			continue
		}
		if rst.StreamID != extra || rst.ErrCode != http2.ErrCodeRefusedStream {
			t.Fatalf("RST_STREAM of stream %d (%v), want stream %d refused", rst.StreamID, rst.ErrCode, extra)
		}
		return
	}
}
