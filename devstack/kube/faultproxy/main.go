// Command faultproxy stands between the control plane and a development cluster's API server
// and injects the faults of the reliability scenarios (docs/reliability.md): latency and error
// answers per verb and resource, hangs, connections refused as if the cluster were
// unreachable, and watch streams cut mid-stream. It also records every request it forwards
// (verb, resource, namespace, name, status), which tests read to count cluster calls.
//
// The API server speaks only TLS, so faults by verb need the proxy to end TLS: it serves the
// development cluster's own certificate and forwards to the API server, passing the client's
// Authorization header through, so the API server still authenticates and authorizes each
// caller (RBAC tests run through it). toxiproxy works at the TCP level and cannot answer
// HTTP errors by verb; mitmproxy needs a newer Python and older libraries than the product
// pins; this is a reverse proxy from Go's standard library with the rules on top.
//
// The control API (plain HTTP on loopback, --control):
//
//	PUT    /rules        [{"verb","resource","errorRate","status","latency","timeout","timeoutRate"}]
//	DELETE /rules        clear every rule and the unreachable switch
//	PUT    /unreachable  {"on": true|false}
//	POST   /drop-watches cut every open watch stream
//	GET    /requests?after=N   the requests recorded after sequence number N
//	GET    /state        {"unreachable", "watchDrops", "seq"}
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"log"
	"math/rand"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Rule is one fault rule; an empty Verb or Resource matches any.
type Rule struct {
	Verb        string  `json:"verb"`
	Resource    string  `json:"resource"`
	ErrorRate   float64 `json:"errorRate"`
	Status      int     `json:"status"`
	Latency     float64 `json:"latency"`
	Timeout     bool    `json:"timeout"`
	TimeoutRate float64 `json:"timeoutRate"`
}

func (r Rule) applies(verb, resource string) bool {
	if r.Verb != "" && r.Verb != verb {
		return false
	}
	return r.Resource == "" || r.Resource == resource || strings.SplitN(resource, ".", 2)[0] == r.Resource
}

// Entry is one forwarded (or refused) request.
type Entry struct {
	Seq         int64  `json:"seq"`
	Verb        string `json:"verb"`
	Resource    string `json:"resource"`
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Subresource string `json:"subresource"`
	Code        int    `json:"code"`
	Path        string `json:"path"`
}

// maxEntries bounds the request log; the oldest entries go first.
const maxEntries = 200000

type proxy struct {
	mu          sync.Mutex
	rules       []Rule
	random      *rand.Rand
	unreachable bool
	watchDrops  int
	// Each open watch's cancel function, so /drop-watches can cut them.
	watches map[int64]context.CancelFunc
	entries []Entry
	seq     int64
	// Connections accepted on the listener, so turning unreachable closes open ones too.
	conns   map[net.Conn]struct{}
	forward *httputil.ReverseProxy
}

// request parses an API path as the API server does: verb, resource ("plural" or
// "plural.group"), namespace, name, subresource.
func request(r *http.Request) (verb, resource, namespace, name, subresource string) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var rest []string
	group := ""
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		group = parts[1]
		rest = parts[3:]
	default:
		return strings.ToLower(r.Method), "", "", "", ""
	}
	watchPath := false
	if len(rest) > 0 && rest[0] == "watch" {
		watchPath = true
		rest = rest[1:]
	}
	if len(rest) >= 2 && rest[0] == "namespaces" && len(rest) > 2 {
		namespace = rest[1]
		rest = rest[2:]
	} else if len(rest) == 2 && rest[0] == "namespaces" {
		resource, name = "namespaces", rest[1]
		rest = nil
	}
	if len(rest) > 0 {
		resource = rest[0]
	}
	if len(rest) > 1 {
		name = rest[1]
	}
	if len(rest) > 2 {
		subresource = strings.Join(rest[2:], "/")
	}
	if group != "" && resource != "" {
		resource += "." + group
	}
	watch := watchPath || r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1"
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case watch:
			verb = "watch"
		case name == "":
			verb = "list"
		default:
			verb = "get"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		if name == "" {
			verb = "deletecollection"
		} else {
			verb = "delete"
		}
	default:
		verb = strings.ToLower(r.Method)
	}
	return verb, resource, namespace, name, subresource
}

type statusRecorder struct {
	http.ResponseWriter
	code int
	// Called once with the status, as the answer starts (a watch is recorded then, not when
	// it ends).
	onHeader func(code int)
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
		if s.onHeader != nil {
			s.onHeader(code)
		}
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Flush() {
	if flusher, ok := s.ResponseWriter.(http.Flusher); ok {
		flusher.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (p *proxy) record(e Entry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	e.Seq = p.seq
	if len(p.entries) >= maxEntries {
		p.entries = p.entries[len(p.entries)-maxEntries/2:]
	}
	p.entries = append(p.entries, e)
}

// decide returns the latency to add, the status to fail with (0: none) and whether to hang.
func (p *proxy) decide(verb, resource string) (time.Duration, int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var latency float64
	status, hang := 0, false
	for _, rule := range p.rules {
		if !rule.applies(verb, resource) {
			continue
		}
		if rule.Latency > latency {
			latency = rule.Latency
		}
		hang = hang || rule.Timeout || (rule.TimeoutRate > 0 && p.random.Float64() < rule.TimeoutRate)
		if status == 0 && rule.ErrorRate > 0 && p.random.Float64() < rule.ErrorRate {
			status = rule.Status
			if status == 0 {
				status = http.StatusInternalServerError
			}
		}
	}
	return time.Duration(latency * float64(time.Second)), status, hang
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	verb, resource, namespace, name, subresource := request(r)
	entry := Entry{Verb: verb, Resource: resource, Namespace: namespace, Name: name, Subresource: subresource, Path: r.URL.RequestURI()}
	latency, status, hang := p.decide(verb, resource)
	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		}
	}
	if hang {
		// Hang until the client gives up, then drop the connection without an answer.
		entry.Code = 0
		p.record(entry)
		<-r.Context().Done()
		panic(http.ErrAbortHandler)
	}
	if status != 0 {
		entry.Code = status
		p.record(entry)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		body, _ := json.Marshal(map[string]any{
			"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
			"reason": "InternalError", "message": "faultproxy: injected error",
		})
		_, _ = w.Write(body)
		return
	}
	// Recorded as its answer starts, before the client can have read it (and a watch while
	// it runs, not when it ends).
	recorder := &statusRecorder{ResponseWriter: w, onHeader: func(code int) {
		e := entry
		e.Code = code
		p.record(e)
	}}
	streaming := verb == "watch" || r.URL.Query().Get("follow") == "true"
	if streaming {
		ctx, cancel := context.WithCancel(r.Context())
		p.mu.Lock()
		p.seq++
		id := p.seq
		p.watches[id] = cancel
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.watches, id)
			p.mu.Unlock()
			cancel()
		}()
		r = r.WithContext(ctx)
	}
	p.forward.ServeHTTP(recorder, r)
	if recorder.code == 0 {
		entry.Code = http.StatusBadGateway // no answer reached the client
		p.record(entry)
	}
	if r.Context().Err() != nil && verb == "watch" {
		// Cut: end the connection without the chunked body's end, as a failing network would.
		panic(http.ErrAbortHandler)
	}
}

func (p *proxy) control() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/rules", func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut:
			var rules []Rule
			if err := json.NewDecoder(r.Body).Decode(&rules); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			p.mu.Lock()
			p.rules = rules
			p.mu.Unlock()
		case http.MethodDelete:
			p.mu.Lock()
			p.rules = nil
			p.unreachable = false
			p.mu.Unlock()
		default:
			http.Error(w, "PUT or DELETE", http.StatusMethodNotAllowed)
		}
	})
	mux.HandleFunc("/unreachable", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			On bool `json:"on"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.unreachable = body.On
		var open []net.Conn
		if body.On {
			for conn := range p.conns {
				open = append(open, conn)
			}
		}
		p.mu.Unlock()
		for _, conn := range open {
			resetConn(conn)
		}
	})
	mux.HandleFunc("/drop-watches", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.watchDrops++
		for _, cancel := range p.watches {
			cancel()
		}
		p.mu.Unlock()
	})
	mux.HandleFunc("/requests", func(w http.ResponseWriter, r *http.Request) {
		after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
		p.mu.Lock()
		var found []Entry
		for _, e := range p.entries {
			if e.Seq > after {
				found = append(found, e)
			}
		}
		p.mu.Unlock()
		if found == nil {
			found = []Entry{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(found)
	})
	mux.HandleFunc("/state", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		state := map[string]any{"unreachable": p.unreachable, "watchDrops": p.watchDrops, "seq": p.seq}
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(state)
	})
	return mux
}

// resetConn closes a connection with a TCP reset, as an unreachable peer's network would.
func resetConn(conn net.Conn) {
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// listener refuses (resets) connections while the proxy is unreachable and tracks open ones.
type listener struct {
	net.Listener
	p *proxy
}

func (l listener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.p.mu.Lock()
		down := l.p.unreachable
		if !down {
			l.p.conns[conn] = struct{}{}
		}
		l.p.mu.Unlock()
		if down {
			resetConn(conn)
			continue
		}
		return trackedConn{conn, l.p}, nil
	}
}

// trackedConn leaves the proxy's set of open connections when it closes.
type trackedConn struct {
	net.Conn
	p *proxy
}

func (c trackedConn) Close() error {
	c.p.mu.Lock()
	delete(c.p.conns, c.Conn)
	c.p.mu.Unlock()
	return c.Conn.Close()
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve the API on (TLS)")
	controlAddr := flag.String("control", "127.0.0.1:0", "address of the control API (HTTP)")
	upstream := flag.String("upstream", "", "the API server's URL (https://...)")
	upstreamCA := flag.String("upstream-ca", "", "CA bundle that signed the API server's certificate")
	certFile := flag.String("tls-cert-file", "", "certificate to serve")
	keyFile := flag.String("tls-private-key-file", "", "its key")
	seed := flag.Int64("seed", 0, "seed of the fault dice (reproducible runs)")
	flag.Parse()

	target, err := url.Parse(*upstream)
	if err != nil || target.Host == "" {
		log.Fatalf("faultproxy: --upstream must be the API server's URL: %v", err)
	}
	pool := x509.NewCertPool()
	if *upstreamCA != "" {
		pem, err := os.ReadFile(*upstreamCA)
		if err != nil {
			log.Fatalf("faultproxy: %v", err)
		}
		pool.AppendCertsFromPEM(pem)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	transport.MaxIdleConnsPerHost = 256
	forward := httputil.NewSingleHostReverseProxy(target)
	forward.Transport = transport
	forward.FlushInterval = -1 // stream watches and followed logs as they come
	forward.ErrorLog = log.New(os.Stderr, "faultproxy: ", log.LstdFlags)

	p := &proxy{
		random:  rand.New(rand.NewSource(*seed)),
		watches: map[int64]context.CancelFunc{},
		conns:   map[net.Conn]struct{}{},
		forward: forward,
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		log.Fatalf("faultproxy: %v", err)
	}
	apiListener, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("faultproxy: %v", err)
	}
	controlListener, err := net.Listen("tcp", *controlAddr)
	if err != nil {
		log.Fatalf("faultproxy: %v", err)
	}
	server := &http.Server{
		Handler:   p,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ErrorLog:  log.New(os.Stderr, "faultproxy: ", log.LstdFlags),
	}
	// Both addresses on one line, once both listen: the launcher reads it.
	log.Printf("serving api=%s control=%s", apiListener.Addr(), controlListener.Addr())
	go func() { log.Fatal(http.Serve(controlListener, p.control())) }()
	log.Fatal(server.ServeTLS(listener{apiListener, p}, "", ""))
}
