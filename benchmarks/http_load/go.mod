module headroom/benchmarks/http_load

go 1.21
