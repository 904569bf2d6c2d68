// The API server's side of a webhook call's TLS handshake, timed (hack/bench-serving-chain.sh): standard
// library only.
module tailor.dev/hack/go/tls-client

go 1.26.0
