// grpc-load: a closed-loop gRPC load generator that costs the machine little, so a benchmark on a small host
// measures the server rather than its client. It sends one pre-serialized request again and again through a
// pass-through codec (no protobuf code on the client) and prints one JSON line of results.
//
// Usage: grpc-load -addr HOST:PORT -method /pkg.Service/Method -request FILE [-clients 4] [-seconds 10] [-ca FILE]
// (with -ca, the connection is TLS and the server's certificate is checked against that CA)
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// message holds serialized protobuf bytes; bytesCodec moves them unchanged.
type message struct{ data []byte }

type bytesCodec struct{}

func (bytesCodec) Marshal(v any) ([]byte, error) { return v.(*message).data, nil }
func (bytesCodec) Unmarshal(data []byte, v any) error {
	m := v.(*message)
	m.data = append(m.data[:0], data...)
	return nil
}
func (bytesCodec) Name() string { return "proto" }

const warmUpCalls = 50
const maxCallsPerClient = 10_000_000

func main() {
	addr := flag.String("addr", "", "server address, host:port")
	method := flag.String("method", "", "full method name, /package.Service/Method")
	requestFile := flag.String("request", "", "file holding the serialized request")
	clients := flag.Int("clients", 4, "concurrent closed-loop clients on one connection")
	seconds := flag.Float64("seconds", 10, "how long to run")
	timeout := flag.Duration("timeout", 5*time.Second, "deadline of each call")
	caFile := flag.String("ca", "", "CA certificate (PEM): speak TLS and check the server against it")
	flag.Parse()
	if *addr == "" || *method == "" || *requestFile == "" || *clients < 1 || *seconds <= 0 {
		fmt.Fprintln(os.Stderr, "grpc-load: -addr, -method and -request are required; -clients and -seconds must be positive")
		os.Exit(2)
	}
	request, err := os.ReadFile(*requestFile)
	if err != nil {
		fail(err)
	}
	transport := insecure.NewCredentials()
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fail(err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			fail(fmt.Errorf("no certificate in %s", *caFile))
		}
		transport = credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
	}
	conn, err := grpc.Dial(*addr, grpc.WithTransportCredentials(transport),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(bytesCodec{})))
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	call := func(reply *message) error {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		return conn.Invoke(ctx, *method, &message{request}, reply)
	}
	var reply message
	for i := 0; i < warmUpCalls; i++ {
		if err := call(&reply); err != nil {
			fail(err)
		}
	}

	latencies := make([][]time.Duration, *clients)
	failed := make([]int, *clients)
	started := time.Now()
	end := started.Add(time.Duration(*seconds * float64(time.Second)))
	var wg sync.WaitGroup
	for c := 0; c < *clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			var reply message
			for i := 0; i < maxCallsPerClient; i++ {
				t := time.Now()
				if t.After(end) {
					return
				}
				if call(&reply) != nil {
					failed[c]++
				}
				latencies[c] = append(latencies[c], time.Since(t))
			}
		}(c)
	}
	wg.Wait()
	elapsed := time.Since(started).Seconds()

	var all []time.Duration
	errors := 0
	for c := range latencies {
		all = append(all, latencies[c]...)
		errors += failed[c]
	}
	if len(all) == 0 {
		fail(fmt.Errorf("no call was made in %v s", *seconds))
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	var total time.Duration
	for _, d := range all {
		total += d
	}
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	quantile := func(q float64) float64 { return ms(all[int(q*float64(len(all)-1))]) }
	out, _ := json.Marshal(map[string]any{
		"calls": len(all), "requests_per_s": float64(len(all)) / elapsed, "errors": errors,
		"p50_ms": quantile(0.50), "p90_ms": quantile(0.90), "p99_ms": quantile(0.99),
		"mean_ms": ms(total) / float64(len(all)), "reply_bytes": len(reply.data),
	})
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "grpc-load:", err)
	os.Exit(1)
}
