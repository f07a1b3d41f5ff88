// http-load: a closed-loop HTTP load generator that costs the machine little, so a benchmark on a small host
// measures the proxy rather than its client. Each of -concurrency workers POSTs one JSON body again and again
// (to the given URLs in turn), reads the whole answer, and the tool prints one JSON line of results: requests
// per second, latency percentiles to the last byte, and the SSE chunks read. Standard library only.
//
// Usage: http-load -urls URL[,URL...] -body JSON [-concurrency 32] [-seconds 10] [-warmup 1] [-header k=v]...
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

type headers []string

func (h *headers) String() string     { return strings.Join(*h, ",") }
func (h *headers) Set(v string) error { *h = append(*h, v); return nil }

type worker struct {
	latencies []float64 // seconds, after the warm-up
	errors    int
	chunks    int
}

func main() {
	urls := flag.String("urls", "", "comma-separated URLs, used in turn")
	body := flag.String("body", "{}", "JSON request body")
	concurrency := flag.Int("concurrency", 32, "concurrent closed-loop workers")
	seconds := flag.Float64("seconds", 10, "measured seconds")
	warmup := flag.Float64("warmup", 1, "seconds of load before measuring")
	var extra headers
	flag.Var(&extra, "header", "request header name=value (repeatable)")
	flag.Parse()
	targets := strings.Split(*urls, ",")
	if *urls == "" || *concurrency < 1 || *seconds <= 0 {
		fmt.Fprintln(os.Stderr, "http-load: -urls, a positive -concurrency and -seconds are needed")
		os.Exit(2)
	}
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		MaxIdleConns: *concurrency * 2, MaxIdleConnsPerHost: *concurrency, DisableCompression: true}}
	payload := []byte(*body)
	start := time.Now()
	measureFrom := start.Add(time.Duration(*warmup * float64(time.Second)))
	end := measureFrom.Add(time.Duration(*seconds * float64(time.Second)))
	workers := make([]worker, *concurrency)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func(w *worker, turn int) {
			defer wg.Done()
			for n := 0; ; n++ {
				began := time.Now()
				if began.After(end) {
					return
				}
				chunks, err := send(client, targets[(turn+n)%len(targets)], payload, extra)
				if began.Before(measureFrom) {
					continue
				}
				if err != nil {
					w.errors++
					continue
				}
				w.chunks += chunks
				w.latencies = append(w.latencies, time.Since(began).Seconds())
			}
		}(&workers[i], i)
	}
	wg.Wait()
	elapsed := time.Since(measureFrom).Seconds()
	var all []float64
	errors, chunks := 0, 0
	for _, w := range workers {
		all = append(all, w.latencies...)
		errors += w.errors
		chunks += w.chunks
	}
	sort.Float64s(all)
	out := map[string]any{"requests": len(all), "errors": errors, "chunks": chunks, "seconds": elapsed,
		"requests_per_s": float64(len(all)) / elapsed, "concurrency": *concurrency,
		"p50_ms": quantile(all, 0.50), "p90_ms": quantile(all, 0.90), "p99_ms": quantile(all, 0.99),
		"max_ms": quantile(all, 1.0)}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}

// send POSTs the body and reads the answer; returns the SSE data chunks it carried (0 for JSON).
func send(client *http.Client, url string, payload []byte, extra headers) (int, error) {
	request, err := http.NewRequest("POST", url, bytes.NewReader(payload))
	if err != nil {
		return 0, err
	}
	request.Header.Set("content-type", "application/json")
	for _, h := range extra {
		name, value, _ := strings.Cut(h, "=")
		request.Header.Set(name, value)
	}
	response, err := client.Do(request)
	if err != nil {
		return 0, err
	}
	defer response.Body.Close()
	if response.StatusCode != 200 {
		io.Copy(io.Discard, response.Body)
		return 0, fmt.Errorf("status %d", response.StatusCode)
	}
	if !strings.HasPrefix(response.Header.Get("content-type"), "text/event-stream") {
		_, err = io.Copy(io.Discard, response.Body)
		return 0, err
	}
	chunks := 0
	lines := bufio.NewScanner(response.Body)
	lines.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for lines.Scan() {
		if bytes.HasPrefix(lines.Bytes(), []byte("data: ")) && !bytes.Equal(lines.Bytes(), []byte("data: [DONE]")) {
			chunks++
		}
	}
	return chunks, lines.Err()
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i] * 1000
}
