// Command ext_proc_go serves an empty Envoy ext_proc servicer with grpc-go, for `headroom bench ext-proc
// --floor go-grpc`: every message of a Process stream is answered with an empty ProcessingResponse (zero bytes
// on the wire), so the CPU it spends is grpc-go's own per stream and per message. Usage: ext_proc_go PORT.
package main

import (
	"fmt"
	"io"
	"net"
	"os"

	"google.golang.org/grpc"
)

// rawCodec passes messages through as bytes: the servicer reads none of them.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *(v.(*[]byte)) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

func process(_ any, stream grpc.ServerStream) error {
	empty := []byte{}
	for {
		var message []byte
		if err := stream.RecvMsg(&message); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := stream.SendMsg(&empty); err != nil {
			return err
		}
	}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ext_proc_go PORT")
		os.Exit(2)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:"+os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	server.RegisterService(&grpc.ServiceDesc{
		ServiceName: "envoy.service.ext_proc.v3.ExternalProcessor",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Process", Handler: process, ServerStreams: true,
			ClientStreams: true}},
	}, struct{}{})
	fmt.Println("ready")
	if err := server.Serve(listener); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
