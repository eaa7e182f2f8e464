// Command tcpceiling measures what plain TCP carries between two hosts: one
// stream, then several at once, each writing large buffers for a fixed time.
// It is the ceiling the gohccl TCP path is judged against (docs/transports.md).
//
// Run it on two hosts at once: the receiver (-role recv) listens, the sender
// (-role send) connects to it. Under tests/netns.py one command serves both:
//
//	go build -o /tmp/tcpceiling ./benchmarks/tcpceiling
//	python tests/netns.py up --hosts 2 [--rate 1gbit] -- /tmp/tcpceiling -host {host} -peer {master}
//
// Host 0 receives, host 1 sends. The sender reports, per stream count, the
// bytes the receiver confirmed it read divided by the time from the first
// write to that confirmation, so socket buffers do not inflate the figure.
//
// With -duplex both hosts send on every connection at once, as the two
// ranks of a collective do (each sends its half and receives the other's):
// each host reports what it received, per direction, from its first write
// to the end of the peer's stream. On a host whose cores do the kernel's
// copies of both directions, this is the ceiling a collective across two
// hosts can reach; the one-way figure is not.
package main

import (
	"cmp"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	host := flag.Int("host", 0, "host index: 0 receives, 1 sends")
	peer := flag.String("peer", "", "receiver's address (the sender dials it; the receiver listens on it)")
	port := flag.Int("port", 29600, "TCP port")
	streams := flag.String("streams", "1,2,4,8", "stream counts to measure, in order")
	secs := flag.Float64("seconds", 2, "seconds each measurement sends")
	chunk := flag.Int("chunk", 4<<20, "bytes per write")
	duplex := flag.Bool("duplex", false, "both hosts send at once on every connection")
	flag.Parse()
	var counts []int
	for _, s := range strings.Split(*streams, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			fail(fmt.Errorf("bad stream count %q", s))
		}
		counts = append(counts, n)
	}
	addr := net.JoinHostPort(*peer, strconv.Itoa(*port))
	if *duplex {
		fail(both(*host, addr, counts, time.Duration(*secs*float64(time.Second)), *chunk))
		return
	}
	if *host == 0 {
		fail(receive(addr, counts))
		return
	}
	fail(send(addr, counts, time.Duration(*secs*float64(time.Second)), *chunk))
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcpceiling:", err)
		os.Exit(1)
	}
}

// receive accepts, for each count, that many connections; each is read to
// its end and answered with the number of bytes read.
func receive(addr string, counts []int) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	for _, n := range counts {
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			c, err := ln.Accept()
			if err != nil {
				return err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				b := make([]byte, 1<<20)
				var total uint64
				for {
					k, err := c.Read(b)
					total += uint64(k)
					if err != nil {
						break
					}
				}
				var out [8]byte
				binary.LittleEndian.PutUint64(out[:], total)
				c.Write(out[:])
			}()
		}
		wg.Wait()
	}
	return nil
}

func send(addr string, counts []int, d time.Duration, chunk int) error {
	data := pattern(chunk)
	fmt.Printf("%-8s %12s %12s\n", "streams", "Gbit/s", "GB/s")
	for _, n := range counts {
		conns := make([]*net.TCPConn, n)
		for i := range conns {
			var err error
			if conns[i], err = dial(addr); err != nil {
				return err
			}
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var total uint64
		var firstErr error
		start := time.Now()
		stop := start.Add(d)
		for _, c := range conns {
			wg.Add(1)
			go func(c *net.TCPConn) {
				defer wg.Done()
				defer c.Close()
				for time.Now().Before(stop) {
					if _, err := c.Write(data); err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						return
					}
				}
				c.CloseWrite()
				var in [8]byte
				if _, err := io.ReadFull(c, in[:]); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				mu.Lock()
				total += binary.LittleEndian.Uint64(in[:])
				mu.Unlock()
			}(c)
		}
		wg.Wait()
		if firstErr != nil {
			return firstErr
		}
		el := time.Since(start).Seconds()
		fmt.Printf("%-8d %12.2f %12.3f\n", n, float64(total)*8/el/1e9, float64(total)/el/1e9)
	}
	return nil
}

// both is -duplex: host 1 dials, host 0 accepts, and on every connection
// each side writes chunks for d, half-closes, and reads the peer's stream to
// its end; each host prints the rate it received at, per stream count.
func both(host int, addr string, counts []int, d time.Duration, chunk int) error {
	data := pattern(chunk)
	var ln net.Listener
	if host == 0 {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return err
		}
		defer ln.Close()
	}
	fmt.Printf("host %d receiving, both ways at once\n%-8s %12s %12s\n", host, "streams", "Gbit/s", "GB/s")
	for _, n := range counts {
		conns := make([]*net.TCPConn, n)
		for i := range conns {
			var err error
			if host == 0 {
				var c net.Conn
				if c, err = ln.Accept(); err == nil {
					conns[i] = c.(*net.TCPConn)
				}
			} else {
				conns[i], err = dial(addr)
			}
			if err != nil {
				return err
			}
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var total uint64
		var firstErr error
		note := func(err error) {
			mu.Lock()
			firstErr = cmp.Or(firstErr, err)
			mu.Unlock()
		}
		start := time.Now()
		stop := start.Add(d)
		for _, c := range conns {
			wg.Add(2)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					if _, err := c.Write(data); err != nil {
						note(err)
						return
					}
				}
				c.CloseWrite()
			}()
			go func() {
				defer wg.Done()
				b := make([]byte, 1<<20)
				var got uint64
				for {
					k, err := c.Read(b)
					got += uint64(k)
					if err == io.EOF {
						break
					}
					if err != nil {
						note(err)
						break
					}
				}
				mu.Lock()
				total += got
				mu.Unlock()
			}()
		}
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
		if firstErr != nil {
			return firstErr
		}
		el := time.Since(start).Seconds()
		fmt.Printf("%-8d %12.2f %12.3f\n", n, float64(total)*8/el/1e9, float64(total)/el/1e9)
	}
	return nil
}

// dial connects to the receiver, retrying for about 5 s while it starts.
func dial(addr string) (*net.TCPConn, error) {
	for try := 0; ; try++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			return c.(*net.TCPConn), nil
		}
		if try > 100 {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pattern returns n bytes of a fixed, non-constant pattern to send.
func pattern(n int) []byte {
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i * 7)
	}
	return data
}
