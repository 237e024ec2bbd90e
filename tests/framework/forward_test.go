package framework

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func TestForwarderRoutesByDialler(t *testing.T) {
	target := echoServer(t)
	listen := MustFreeAddr(t)
	_, portText, _ := net.SplitHostPort(listen)
	port, _ := strconv.Atoi(portText)
	me := map[int]string{os.Getpid(): "tester"}
	var mu sync.Mutex
	rt := Route{}
	f, err := NewForwarder("echo", listen, target,
		func(p int) string { return socketOwner(p, port, me) },
		func(from string) Route {
			mu.Lock()
			defer mu.Unlock()
			if from != "tester" {
				return Route{Drop: true}
			}
			return rt
		})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	set := func(r Route) {
		mu.Lock()
		rt = r
		mu.Unlock()
		f.Reroute()
	}

	conn, err := net.Dial("tcp4", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	roundTrip := func(line string, wait time.Duration) (string, error) {
		if _, err := conn.Write([]byte(line + "\n")); err != nil {
			return "", err
		}
		_ = conn.SetReadDeadline(time.Now().Add(wait))
		got, err := r.ReadString('\n')
		return got, err
	}
	if got, err := roundTrip("one", 10*time.Second); err != nil || got != "one\n" {
		t.Fatalf("round trip = %q, %v; want %q", got, err, "one\n")
	}
	WaitFor(t, 5*time.Second, func() error {
		if src := f.Sources(); len(src) != 1 || src[0] != "tester" {
			return errors.New("the connection is not traced to this process")
		}
		return nil
	})

	// A slowed link delays every chunk at least the latency.
	set(Route{Delay: 100 * time.Millisecond})
	start := time.Now()
	if got, err := roundTrip("two", 10*time.Second); err != nil || got != "two\n" {
		t.Fatalf("slowed round trip = %q, %v", got, err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("slowed round trip took %v, want at least 100ms", d)
	}

	// A dropped link goes silent without a reset...
	set(Route{Drop: true})
	var ne net.Error
	if _, err := roundTrip("three", 300*time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("round trip through a dropped link = %v, want a read timeout", err)
	}
	// ...and is closed when healed, since bytes were lost.
	set(Route{})
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); !errors.Is(err, io.EOF) {
		t.Fatalf("read after healing a dropped link = %v, want EOF", err)
	}
}
