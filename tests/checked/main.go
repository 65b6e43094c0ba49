// Command checked records a history of client operations against the running services and
// asks porcupine whether each session's history is linearizable (docs/operations.md,
// "Checked histories"). scripts/soak --checked builds it, starts the services and injects the
// faults; this program only talks HTTP.
//
//	checked --ingest URL,URL --recovery URL --token T --out DIR [--seconds N] [--groups N] [--library BIN]
//
// With --library, each session has a third writer that appends and claims through the Rust
// library (BIN is tests/bin/checked_writer.rs, given the stack's settings in the environment).
//
// It runs until --seconds pass or it gets SIGTERM/SIGINT, then reads every session from the
// log once more, checks, prints the figures and exits 1 when a session's history is not
// linearizable (a visualisation of it in DIR).
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"
)

func main() {
	os.Exit(run())
}

func run() int {
	ingest := flag.String("ingest", "", "ingest base URLs, comma-separated")
	recovery := flag.String("recovery", "", "the recovery service's base URL")
	token := flag.String("token", "", "a bearer token with the harness and reader roles")
	out := flag.String("out", "", "where the history and any visualisation are written")
	seconds := flag.Float64("seconds", 150, "how long to run (SIGTERM stops it earlier)")
	groups := flag.Int("groups", 4, "sessions written at once")
	appends := flag.Int("appends", 40, "acknowledged appends after which a group starts another session")
	seed := flag.Int64("seed", time.Now().UnixNano(), "seed of the clients' choices")
	checkTimeout := flag.Duration("check-timeout", 60*time.Second, "how long porcupine may take per session")
	libraryBin := flag.String("library", "", "the library writer's program (tests/bin/checked_writer.rs); none: HTTP writers only")
	flag.Parse()
	if *ingest == "" || *recovery == "" || *token == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "checked: --ingest, --recovery, --token and --out are required")
		return 2
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "checked:", err)
		return 2
	}
	api := newAPI(strings.Split(*ingest, ","), *recovery, *token)
	if *libraryBin != "" {
		lib, err := newLibrary(*libraryBin, 20*time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, "checked:", err)
			return 2
		}
		defer lib.close()
		api.library = lib
	}
	rec := newRecorder()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Duration(*seconds*float64(time.Second)))
	defer cancel()

	doors := fmt.Sprintf("%d ingest instances", len(api.ingest))
	if api.library != nil {
		doors += " and the Rust library"
	}
	fmt.Printf("[checked] %d groups through %s, seed %d, up to %.0fs\n", *groups, doors, *seed, *seconds)
	var wg sync.WaitGroup
	for g := 0; g < *groups; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			runGroup(ctx, api, rec, rand.New(rand.NewSource(*seed+int64(g))), g, *appends)
		}(g)
	}
	wg.Wait()
	fmt.Printf("[checked] load stopped after %.0fs; reading every session from the log once more\n", time.Since(rec.started).Seconds())
	finalReads(api, rec)
	verdict := report(rec, *out, *checkTimeout)
	if api.library != nil && api.library.diedEarly() {
		fmt.Println("[checked] the library writer (--library) exited during the run: its sessions had HTTP writers only from then on; see its output above")
		return 1
	}
	return verdict
}

// finalReads reads each session from the log once the load stopped: every append
// acknowledged must be in it. An attempt that fails is retried for up to two minutes.
func finalReads(api *API, rec *Recorder) {
	for _, session := range rec.sessionIDs() {
		client := rec.newClient()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			in := Input{Session: session, Kind: OpLogRead, Client: client}
			if out := rec.do(in, func() Output { return api.logRead(session) }); out.Status == Ok || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second) // a backoff between attempts, not a wait for a condition
		}
	}
}

// runGroup writes one session after another until ctx ends: two writers taking it over from
// each other, a log reader and two projection readers.
func runGroup(ctx context.Context, api *API, rec *Recorder, rng *rand.Rand, group, appends int) {
	for ctx.Err() == nil {
		opened, err := api.create(fmt.Sprintf("checked-%d", group))
		if err != nil {
			// A service down for a fault: try again (creates are not part of the checked history).
			time.Sleep(time.Second)
			continue
		}
		rec.noteOpened(opened)
		runSession(ctx, api, rec, rng.Int63(), opened, appends)
	}
}

func runSession(ctx context.Context, api *API, rec *Recorder, seed int64, opened Opened, appends int) {
	session := opened.SessionID
	sctx, done := context.WithCancel(ctx)
	defer done()
	var acked sync.WaitGroup
	acked.Add(1)
	var once sync.Once
	count := &counter{limit: appends, reached: func() { once.Do(acked.Done) }}
	var wg sync.WaitGroup
	writers := []*writer{
		{client: rec.newClient(), name: "w0", holds: true, epoch: opened.Epoch, token: opened.WriterToken, next: opened.NextSeq},
		{client: rec.newClient(), name: "w1"},
	}
	if api.library != nil {
		writers = append(writers, &writer{client: rec.newClient(), name: "w2", lib: api.library})
	}
	for i, w := range writers {
		wg.Add(1)
		go func(w *writer, seed int64) {
			defer wg.Done()
			w.run(sctx, api, rec, rand.New(rand.NewSource(seed)), session, count)
		}(w, seed+int64(i))
	}
	readers := []func(*rand.Rand){
		func(rng *rand.Rand) { logReader(sctx, api, rec, rng, session) },
		func(rng *rand.Rand) { projReader(sctx, api, rec, rng, session, 0) },
		func(rng *rand.Rand) { projReader(sctx, api, rec, rng, session, 1) },
	}
	for i, r := range readers {
		wg.Add(1)
		go func(r func(*rand.Rand), seed int64) {
			defer wg.Done()
			r(rand.New(rand.NewSource(seed)))
		}(r, seed+10+int64(i))
	}
	go func() {
		acked.Wait()
		done()
	}()
	<-sctx.Done()
	wg.Wait()
	once.Do(acked.Done)
}

type counter struct {
	mu      sync.Mutex
	n       int
	limit   int
	reached func()
}

func (c *counter) add() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.n >= c.limit {
		c.reached()
	}
}

// A writer appends while it holds the session; fenced, it waits a moment and takes the
// session back (a claim through ingest or a resume through recovery), so the writers of a
// session take it from each other all the time. A library writer (lib set) appends and
// claims through the Rust library instead.
type writer struct {
	client  int
	name    string
	holds   bool
	epoch   uint64
	token   string
	next    uint64
	pending *Input
	lib     *Library
}

func (w *writer) run(ctx context.Context, api *API, rec *Recorder, rng *rand.Rand, session string, count *counter) {
	for ctx.Err() == nil {
		if !w.holds {
			// How long a writer leaves the session to the other before taking it back.
			pause(ctx, time.Duration(500+rng.Intn(2000))*time.Millisecond)
			if ctx.Err() != nil {
				return
			}
			w.takeOver(api, rec, rng, session)
			continue
		}
		if w.pending == nil {
			kind := OpAppend
			if w.lib != nil {
				kind = OpLibAppend
			}
			w.pending = &Input{Session: session, Kind: kind, Client: w.client, Epoch: w.epoch, Seq: w.next, EventID: newUUIDv7()}
		}
		in := *w.pending
		via := rng.Intn(len(api.ingest))
		out := rec.do(in, func() Output {
			if w.lib != nil {
				return w.lib.appendEvent(in)
			}
			return api.appendEvent(via, in, w.token)
		})
		switch {
		case out.Status == Ok:
			w.pending = nil
			w.next = out.NextSeq
			count.add()
		case out.Status == Unknown:
			// Retried with the same seq and event id: answered with the first write's
			// position if it landed.
			pause(ctx, time.Duration(100+rng.Intn(400))*time.Millisecond)
		case out.Code == "wrong_seq" && out.NextSeq > 0:
			w.pending = nil
			w.next = out.NextSeq
		case out.Code == "not_sent":
			pause(ctx, 200*time.Millisecond)
		default:
			// Fenced, a seq another writer took, or anything else: take the session back.
			w.pending = nil
			w.holds = false
		}
	}
}

func (w *writer) takeOver(api *API, rec *Recorder, rng *rand.Rand, session string) {
	kind := OpClaim
	if w.lib != nil {
		kind = OpLibClaim
	} else if rng.Intn(2) == 0 {
		kind = OpResume
	}
	in := Input{Session: session, Kind: kind, Client: w.client}
	via := rng.Intn(len(api.ingest))
	out := rec.do(in, func() Output {
		if kind == OpLibClaim {
			return w.lib.claim(session, w.name)
		}
		if kind == OpClaim {
			return api.claim(via, session, w.name)
		}
		return api.resume(session, w.name)
	})
	if out.Status == Ok {
		w.holds, w.epoch, w.next, w.pending = true, out.Epoch, out.NextSeq, nil
		w.token = out.token
	}
}

func logReader(ctx context.Context, api *API, rec *Recorder, rng *rand.Rand, session string) {
	client := rec.newClient()
	for ctx.Err() == nil {
		rec.do(Input{Session: session, Kind: OpLogRead, Client: client}, func() Output { return api.logRead(session) })
		pause(ctx, time.Duration(100+rng.Intn(300))*time.Millisecond)
	}
}

func projReader(ctx context.Context, api *API, rec *Recorder, rng *rand.Rand, session string, reader int) {
	client := rec.newClient()
	for ctx.Err() == nil {
		rec.do(Input{Session: session, Kind: OpProjRead, Client: client, Reader: reader}, func() Output { return api.projRead(session) })
		pause(ctx, time.Duration(100+rng.Intn(300))*time.Millisecond)
	}
}

// pause is the clients' think time: a cadence of load, never a wait for a condition.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// report checks each session's history with porcupine and prints the figures; 1 when a
// session's history is not linearizable.
func report(rec *Recorder, out string, timeout time.Duration) int {
	ops, inits := rec.finish()
	if err := writeHistory(filepath.Join(out, "history.jsonl"), ops); err != nil {
		fmt.Fprintln(os.Stderr, "checked: writing the history:", err)
	}
	tally := map[string]map[string]int{}
	var failedReads int
	bySession := map[string][]porcupine.Operation{}
	for _, op := range ops {
		in, o := op.Input.(Input), op.Output.(Output)
		if tally[in.Kind] == nil {
			tally[in.Kind] = map[string]int{}
		}
		tally[in.Kind][o.Status]++
		// A read that was not answered says nothing: it is counted, not checked.
		if (in.Kind == OpLogRead || in.Kind == OpProjRead) && o.Status != Ok {
			failedReads++
			continue
		}
		bySession[in.Session] = append(bySession[in.Session], op)
	}
	fmt.Printf("[checked] operations recorded: %d over %d sessions (history: %s)\n", len(ops), len(inits), filepath.Join(out, "history.jsonl"))
	for _, kind := range []string{OpAppend, OpLibAppend, OpClaim, OpLibClaim, OpResume, OpLogRead, OpProjRead} {
		t := tally[kind]
		fmt.Printf("[checked]   %-9s %6d: ok %d, refused %d, unknown %d\n", kind, t[Ok]+t[Refused]+t[Unknown], t[Ok], t[Refused], t[Unknown])
	}
	fmt.Printf("[checked]   reads not answered (not checked): %d\n", failedReads)
	sessions := make([]string, 0, len(inits))
	for s := range inits {
		sessions = append(sessions, s)
	}
	sort.Strings(sessions)
	var linearizable, violations, undecided int
	checking := time.Now()
	for _, session := range sessions {
		model := SessionModel(inits[session])
		history := bySession[session]
		started := time.Now()
		result, info := porcupine.CheckOperationsVerbose(model, history, timeout)
		switch result {
		case porcupine.Ok:
			linearizable++
		case porcupine.Unknown:
			undecided++
			fmt.Printf("[checked] session %s: undecided (porcupine ran out of its %s on %d operations)\n", session, timeout, len(history))
		default:
			violations++
			path := filepath.Join(out, "violation-"+session+".html")
			if err := porcupine.VisualizePath(model, info, path); err != nil {
				fmt.Fprintln(os.Stderr, "checked: writing the visualisation:", err)
			}
			fmt.Printf("[checked] session %s: NOT linearizable (%d operations, checked in %s)\n", session, len(history), time.Since(started).Round(time.Millisecond))
			fmt.Printf("[checked]   first violation: %s\n", firstViolation(model, info, history))
			fmt.Printf("[checked]   visualisation: %s\n", path)
		}
	}
	fmt.Printf("[checked] sessions checked: %d in %s: linearizable %d, not linearizable %d, undecided %d\n",
		len(sessions), time.Since(checking).Round(time.Millisecond), linearizable, violations, undecided)
	if violations > 0 {
		return 1
	}
	return 0
}

// firstViolation names the operation no linearization could place: the earliest invoked
// operation outside the longest partial linearization porcupine found.
func firstViolation(model porcupine.Model, info porcupine.LinearizationInfo, history []porcupine.Operation) string {
	var longest []porcupine.Operation
	for _, partition := range info.PartialLinearizationsOperations() {
		for _, lin := range partition {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	placed := map[int64]bool{}
	for _, op := range longest {
		placed[op.Call] = true
	}
	var first *porcupine.Operation
	for i := range history {
		op := &history[i]
		if !placed[op.Call] && (first == nil || op.Call < first.Call) {
			first = op
		}
	}
	if first == nil {
		return "(none found)"
	}
	return fmt.Sprintf("after %d operations in order, none places %q (invoked at %.3fs)",
		len(longest), model.DescribeOperation(first.Input, first.Output), float64(first.Call)/1e9)
}
