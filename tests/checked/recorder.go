package main

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Recorder keeps every operation with its invocation and completion times (nanoseconds since
// the run started, strictly increasing) and each session's state when its create was answered.
type Recorder struct {
	mu      sync.Mutex
	started time.Time
	last    int64
	clients int
	ops     []porcupine.Operation
	inits   map[string]State
}

func newRecorder() *Recorder {
	return &Recorder{started: time.Now(), inits: map[string]State{}}
}

// now is a timestamp later than every one handed out before.
func (r *Recorder) now() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := time.Since(r.started).Nanoseconds()
	if t <= r.last {
		t = r.last + 1
	}
	r.last = t
	return t
}

func (r *Recorder) newClient() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clients++
	return r.clients - 1
}

// started_ notes a session whose create was answered: the model starts from its start event.
func (r *Recorder) noteOpened(opened Opened) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inits[opened.SessionID] = Started(opened.Event.Seq, opened.Event.EventID, opened.Epoch)
}

func (r *Recorder) sessionIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.inits))
	for id := range r.inits {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// do performs an operation and records it: invoked, answered.
func (r *Recorder) do(in Input, perform func() Output) Output {
	call := r.now()
	out := perform()
	ret := r.now()
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: in.Client, Input: in, Call: call, Output: out, Return: ret})
	r.mu.Unlock()
	return out
}

// finish gives every operation of unknown outcome a completion after everything else (it may
// take effect at any time from its invocation on) and returns the history and the sessions.
func (r *Recorder) finish() ([]porcupine.Operation, map[string]State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.last + 1
	ops := make([]porcupine.Operation, len(r.ops))
	for i, op := range r.ops {
		if op.Output.(Output).Status == Unknown {
			op.Return = end
		}
		ops[i] = op
	}
	return ops, r.inits
}

// writeHistory writes one JSON object per operation: what the visualisation shows, for tools.
func writeHistory(path string, ops []porcupine.Operation) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, op := range ops {
		out := op.Output.(Output)
		if err := enc.Encode(map[string]interface{}{"client": op.ClientId, "call_ns": op.Call, "return_ns": op.Return, "input": op.Input, "output": out}); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// newUUIDv7 is a fresh event id: 48 bits of Unix milliseconds, version 7, random bits.
func newUUIDv7() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(time.Now().UnixMilli()))
	copy(b[:6], ms[2:])
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
