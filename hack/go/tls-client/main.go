// Command tls-client times what a Go TLS client (the API server calling a webhook) spends on each new
// connection to each of the given servers: the full handshake, verifying the server's chain against the CA,
// then one small HTTP/1.1 request and the connection closed, as the API server's webhook client does when a
// burst needs a new connection. Servers are measured in alternating batches in one run; the CPU time is this
// process's own (user + system, getrusage), so the servers' work is not in it.
//
//	tls-client -ca ca.crt -n 500 -rounds 5 NAME=https://127.0.0.1:PORT ...
//
// Prints one line per batch and, per server, `client_cpu_us_per_connection_NAME=N` (the median of its batches).
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"
)

func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// batch makes n requests to url, each on a new connection; the CPU time per connection.
func batch(roots *x509.CertPool, url string, n int) (time.Duration, error) {
	body := strings.Repeat("x", 1024)
	start := cpu()
	for i := 0; i < n; i++ {
		client := &http.Client{Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}},
			DisableKeepAlives: true,
		}}
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		client.CloseIdleConnections()
	}
	return (cpu() - start) / time.Duration(n), nil
}

func main() {
	ca := flag.String("ca", "", "PEM file of the CA the servers' chains lead to")
	n := flag.Int("n", 500, "connections per batch")
	rounds := flag.Int("rounds", 5, "batches per server, alternated")
	flag.Parse()
	pem, err := os.ReadFile(*ca)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		fmt.Fprintln(os.Stderr, "no certificate in", *ca)
		os.Exit(1)
	}
	type server struct{ name, url string }
	var servers []server
	for _, a := range flag.Args() {
		name, url, ok := strings.Cut(a, "=")
		if !ok {
			fmt.Fprintln(os.Stderr, "want NAME=URL, got", a)
			os.Exit(2)
		}
		servers = append(servers, server{name, url})
	}
	per := map[string][]float64{}
	// One unmeasured batch each first: connection pools, page faults, the servers' caches.
	for r := 0; r <= *rounds; r++ {
		for _, s := range servers {
			d, err := batch(roots, s.url, *n)
			if err != nil {
				fmt.Fprintln(os.Stderr, s.name, err)
				os.Exit(1)
			}
			us := float64(d.Nanoseconds()) / 1000
			label := fmt.Sprint(r)
			if r == 0 {
				label = "warm-up"
			} else {
				per[s.name] = append(per[s.name], us)
			}
			fmt.Printf("round %-7s %-12s %7.1f µs CPU per connection\n", label, s.name, us)
		}
	}
	for _, s := range servers {
		v := per[s.name]
		sort.Float64s(v)
		fmt.Printf("client_cpu_us_per_connection_%s=%.1f\n", s.name, v[len(v)/2])
	}
}
