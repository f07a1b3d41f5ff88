// ext_proc_load: a closed-loop Envoy ext_proc client that costs the machine little, so a benchmark on a small host
// measures the endpoint picker rather than its client. Each of -streams workers opens a Process stream, sends the
// exchange's messages as Envoy does (pre-serialized, passed through as bytes: no protobuf code here), reads the
// answers awaited after each, half-closes the stream and awaits its status, then opens the next, for -seconds
// after -warmup seconds. It prints one JSON line: streams completed, those answered with an immediate response,
// and the decision latency's percentiles (from a stream's first message to the first answer read after the
// -decided message: the answer that routes the request).
//
// Usage: ext_proc_load -addr HOST:PORT -messages FILE -awaited 0,2,1,1 -decided 1 [-streams 16] [-seconds 10]
// FILE holds the messages, each as a 4-byte big-endian length and the serialized ProcessingRequest.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// rawCodec passes messages through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *(v.(*[]byte)) = append((*(v.(*[]byte)))[:0], data...); return nil }
func (rawCodec) Name() string                       { return "proto" }

const immediateResponseTag = 0x3a // ProcessingResponse.immediate_response: field 7, length-delimited

type worker struct {
	latencies []float64 // ms
	streams   int
	refused   int
	err       error
}

func main() {
	addr := flag.String("addr", "", "ext_proc server, host:port")
	messagesFile := flag.String("messages", "", "the exchange's messages, length-prefixed")
	awaitedList := flag.String("awaited", "", "answers read after each message, comma-separated")
	decided := flag.Int("decided", 0, "index of the message whose first answer routes the request")
	streams := flag.Int("streams", 16, "concurrent closed-loop streams")
	seconds := flag.Float64("seconds", 10, "measured seconds")
	warmup := flag.Float64("warmup", 1, "seconds of load before measuring")
	flag.Parse()
	messages, err := readMessages(*messagesFile)
	if err != nil {
		fail(err)
	}
	var awaited []int
	for _, field := range strings.Split(*awaitedList, ",") {
		n, err := strconv.Atoi(field)
		if err != nil {
			fail(fmt.Errorf("-awaited: %v", err))
		}
		awaited = append(awaited, n)
	}
	if *addr == "" || len(awaited) != len(messages) || *streams < 1 || *seconds <= 0 {
		fail(fmt.Errorf("-addr, -messages with one -awaited count per message, positive -streams and -seconds are needed"))
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	desc := &grpc.StreamDesc{StreamName: "Process", ServerStreams: true, ClientStreams: true}
	start := time.Now()
	measureFrom := start.Add(time.Duration(*warmup * float64(time.Second)))
	end := measureFrom.Add(time.Duration(*seconds * float64(time.Second)))
	workers := make([]worker, *streams)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func(w *worker) {
			defer wg.Done()
			for began := time.Now(); began.Before(end); began = time.Now() {
				latency, refused, err := exchange(conn, desc, messages, awaited, *decided)
				if err != nil {
					w.err = err
					return
				}
				if began.Before(measureFrom) {
					continue
				}
				w.streams++
				if refused {
					w.refused++
				}
				w.latencies = append(w.latencies, latency)
			}
		}(&workers[i])
	}
	wg.Wait()
	elapsed := time.Since(measureFrom).Seconds()
	var all []float64
	total, refused := 0, 0
	for _, w := range workers {
		if w.err != nil {
			fail(w.err)
		}
		all = append(all, w.latencies...)
		total += w.streams
		refused += w.refused
	}
	sort.Float64s(all)
	line, _ := json.Marshal(map[string]any{"streams": total, "refused": refused, "seconds": elapsed,
		"streams_per_s": float64(total) / elapsed, "p50_ms": quantile(all, 0.50), "p99_ms": quantile(all, 0.99)})
	fmt.Println(string(line))
}

// exchange runs one stream; returns its decision latency (ms) and whether it was refused.
func exchange(conn *grpc.ClientConn, desc *grpc.StreamDesc, messages [][]byte, awaited []int,
	decided int) (float64, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, err := conn.NewStream(ctx, desc, "/envoy.service.ext_proc.v3.ExternalProcessor/Process")
	if err != nil {
		return 0, false, err
	}
	began := time.Now()
	latency, refused := 0.0, false
	var answer []byte
steps:
	for i, message := range messages {
		m := message
		if err := stream.SendMsg(&m); err != nil {
			return 0, false, err
		}
		for n := 0; n < awaited[i]; n++ {
			if err := stream.RecvMsg(&answer); err != nil {
				return 0, false, err
			}
			if i == decided && n == 0 {
				latency = float64(time.Since(began).Nanoseconds()) / 1e6
			}
			if len(answer) > 0 && answer[0] == immediateResponseTag {
				refused = true
				break steps
			}
		}
	}
	if err := stream.CloseSend(); err != nil {
		return 0, false, err
	}
	for {
		if err := stream.RecvMsg(&answer); err == io.EOF {
			return latency, refused, nil
		} else if err != nil {
			return 0, false, err
		}
	}
}

func readMessages(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var messages [][]byte
	for len(data) > 0 {
		if len(data) < 4 || int(binary.BigEndian.Uint32(data)) > len(data)-4 {
			return nil, fmt.Errorf("%s: a message's length runs past the file's end", path)
		}
		n := binary.BigEndian.Uint32(data)
		messages = append(messages, data[4:4+n])
		data = data[4+n:]
	}
	return messages, nil
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))]
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ext_proc_load:", err)
	os.Exit(1)
}
