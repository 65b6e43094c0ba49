package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Library is the Rust library's writer door: a checked_writer process (tests/bin) that does
// each request with SessionWriter and answers it, one JSON line each way, matched by id.
type Library struct {
	cmd     *exec.Cmd
	mu      sync.Mutex
	stdin   io.WriteCloser
	nextID  uint64
	waiting map[uint64]chan libAnswer
	timeout time.Duration
	// Closed when the process's output ends: a run whose library writer died is not a run
	// through the library, and the report says so.
	gone    chan struct{}
	closing bool
}

type libAnswer struct {
	ID        uint64 `json:"id"`
	Status    string `json:"status"`
	Code      string `json:"code"`
	Epoch     uint64 `json:"epoch"`
	NextSeq   uint64 `json:"next_seq"`
	ClaimSeq  uint64 `json:"claim_seq"`
	ClaimID   string `json:"claim_id"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Duplicate bool   `json:"duplicate"`
}

// newLibrary starts bin with the environment it was given (the stack corner's settings).
func newLibrary(bin string, timeout time.Duration) (*Library, error) {
	cmd := exec.Command(bin)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	l := &Library{cmd: cmd, stdin: stdin, waiting: map[uint64]chan libAnswer{}, timeout: timeout, gone: make(chan struct{})}
	go l.read(stdout)
	return l, nil
}

func (l *Library) read(stdout io.Reader) {
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 64*1024), 1024*1024)
	for lines.Scan() {
		var a libAnswer
		if err := json.Unmarshal(lines.Bytes(), &a); err != nil {
			fmt.Fprintln(os.Stderr, "checked: an answer of the library writer that does not parse:", err)
			continue
		}
		l.mu.Lock()
		ch := l.waiting[a.ID]
		delete(l.waiting, a.ID)
		l.mu.Unlock()
		if ch != nil {
			ch <- a
		}
	}
	// The process is gone: every request still waiting is answered unknown.
	l.mu.Lock()
	for id, ch := range l.waiting {
		delete(l.waiting, id)
		ch <- libAnswer{Status: Unknown, Code: "the library writer exited"}
	}
	l.mu.Unlock()
	close(l.gone)
}

// diedEarly says whether the process ended before close was called.
func (l *Library) diedEarly() bool {
	l.mu.Lock()
	closing := l.closing
	l.mu.Unlock()
	select {
	case <-l.gone:
		return !closing
	default:
		return false
	}
}

// ask sends one request; an answer that does not come within the timeout is unknown (the
// request may still take effect: the model allows for that).
func (l *Library) ask(request map[string]interface{}) libAnswer {
	ch := make(chan libAnswer, 1)
	l.mu.Lock()
	l.nextID++
	id := l.nextID
	request["id"] = id
	l.waiting[id] = ch
	line, err := json.Marshal(request)
	if err == nil {
		_, err = l.stdin.Write(append(line, '\n'))
	}
	l.mu.Unlock()
	if err != nil {
		l.mu.Lock()
		delete(l.waiting, id)
		l.mu.Unlock()
		return libAnswer{Status: Refused, Code: "not_sent"}
	}
	select {
	case a := <-ch:
		return a
	case <-time.After(l.timeout):
		l.mu.Lock()
		delete(l.waiting, id)
		l.mu.Unlock()
		return libAnswer{Status: Unknown, Code: "timeout"}
	}
}

func (l *Library) claim(session, writer string) Output {
	a := l.ask(map[string]interface{}{"op": "claim", "session": session, "writer": writer})
	return Output{Status: a.Status, Code: a.Code, Epoch: a.Epoch, NextSeq: a.NextSeq, ClaimSeq: a.ClaimSeq, ClaimID: a.ClaimID}
}

func (l *Library) appendEvent(in Input) Output {
	a := l.ask(map[string]interface{}{"op": "append", "session": in.Session, "seq": in.Seq, "event_id": in.EventID})
	return Output{Status: a.Status, Code: a.Code, NextSeq: a.NextSeq, Partition: a.Partition, Offset: a.Offset, Duplicate: a.Duplicate}
}

// close ends the process: its stdin closed, it finishes what it was asked and exits.
func (l *Library) close() {
	l.mu.Lock()
	l.closing = true
	l.mu.Unlock()
	_ = l.stdin.Close()
	done := make(chan struct{})
	go func() {
		_ = l.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = l.cmd.Process.Kill()
	}
}
