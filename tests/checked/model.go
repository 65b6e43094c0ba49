package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The kinds of operation a client performs on one session.
const (
	OpAppend   = "append"    // POST /v1/sessions/{id}/events through an ingest instance
	OpClaim    = "claim"     // POST /v1/sessions/{id}/claim through an ingest instance
	OpResume   = "resume"    // POST /v1/sessions/{id}/resume on recovery (a claim and its bundle)
	OpLogRead  = "log-read"  // GET /v1/sessions/{id} on recovery: the session rebuilt from the log to its end
	OpProjRead = "proj-read" // GET /v1/sessions/{id}/events on recovery: the range the projector's event index holds
	// The Rust library's doors (tests/bin/checked_writer.rs): held to the same model as
	// their HTTP counterparts, counted apart.
	OpLibAppend = "lib-append" // SessionWriter::append_confirmed
	OpLibClaim  = "lib-claim"  // SessionWriter::claim
)

// kindOf is the model's kind of an operation: a library door is its HTTP counterpart.
func kindOf(kind string) string {
	switch kind {
	case OpLibAppend:
		return OpAppend
	case OpLibClaim:
		return OpClaim
	}
	return kind
}

// How an operation ended.
const (
	Ok      = "ok"      // a 2xx answer
	Refused = "refused" // a 4xx answer (or a connection never opened): nothing was done
	Unknown = "unknown" // a 5xx answer, a timeout or a connection lost: it may or may not have been done
)

// MaxReaders is how many projection readers of one session the model tells apart.
const MaxReaders = 4

// Input is what a client asked for.
type Input struct {
	Session string
	Kind    string
	Client  int
	// Append: the writer's epoch, the seq and the event id it sent.
	Epoch   uint64
	Seq     uint64
	EventID string
	// Projection read: which reader of the session (0..MaxReaders-1).
	Reader int
}

// Output is what the client was answered.
type Output struct {
	Status string
	// The problem's code for a refusal, or what went wrong for an unknown outcome.
	Code string
	// Append: the position it was answered with.
	Partition int32
	Offset    int64
	Duplicate bool
	// Claim and resume: the new epoch and the seq the next append takes; a claim's own
	// (seq, event id) from ingest; the hash chain after a resume, from its bundle.
	Epoch    uint64
	NextSeq  uint64
	ClaimSeq uint64
	ClaimID  string
	// Log read: the rebuilt state's last seq, epoch and hash chain; resume: the chain.
	LastSeq uint64
	Chain   string
	// Projection read: the events of the range, as "seq:event_id@epoch" joined by commas.
	Events string
	Count  int
	// The writer token a claim or resume answered (kept out of the history file).
	token string
}

// State is one session as the model sees it: a value, so that porcupine compares states with
// == (every field is comparable).
type State struct {
	// The accepted events that take a seq, in order, "seq:event_id@epoch" joined by commas.
	Events string
	Count  uint64
	// The current writer epoch.
	Epoch uint64
	// The hash chain over every accepted (seq, event id), claims included, as the fold keeps
	// it (SessionState::history); ChainUnknown after a claim whose answer was lost.
	Chain string
	// The number of events each projection reader last saw.
	Seen [MaxReaders]uint64
}

// ChainUnknown marks a hash chain the model cannot compute (a claim's event id was never
// answered); the next log read or resume bundle names it again.
const ChainUnknown = "?"

// Entry is how one event appears in State.Events and a projection read.
func Entry(seq uint64, eventID string, epoch uint64) string {
	return fmt.Sprintf("%d:%s@%d", seq, eventID, epoch)
}

// NextChain is the fold's hash chain after accepting (seq, event id): SHA-256 over the
// previous chain's hex text, the seq as 8 big-endian bytes and the id's 16 bytes.
func NextChain(chain string, seq uint64, eventID string) string {
	if chain == ChainUnknown {
		return ChainUnknown
	}
	id, err := parseUUID(eventID)
	if err != nil {
		return ChainUnknown
	}
	h := sha256.New()
	h.Write([]byte(chain))
	var be [8]byte
	binary.BigEndian.PutUint64(be[:], seq)
	h.Write(be[:])
	h.Write(id)
	return hex.EncodeToString(h.Sum(nil))
}

func parseUUID(s string) ([]byte, error) {
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != 16 {
		return nil, fmt.Errorf("not a UUID: %q", s)
	}
	return b, nil
}

// Started is a session's state right after its create was answered: the start event at seq 1.
func Started(startSeq uint64, startID string, epoch uint64) State {
	return State{
		Events: Entry(startSeq, startID, epoch),
		Count:  startSeq,
		Epoch:  epoch,
		Chain:  NextChain("", startSeq, startID),
	}
}

// holds says whether the accepted history has exactly this event at its seq.
func (s State) holds(seq uint64, eventID string, epoch uint64) bool {
	if seq == 0 || seq > s.Count {
		return false
	}
	return strings.Split(s.Events, ",")[seq-1] == Entry(seq, eventID, epoch)
}

// accepts says whether the fold would accept this append as a new event now: the current
// epoch (a claim's epoch is the only writer from its position on), the next seq.
func (s State) accepts(in Input) bool {
	return in.Epoch == s.Epoch && in.Seq == s.Count+1
}

func (s State) appended(in Input) State {
	s.Events += "," + Entry(in.Seq, in.EventID, in.Epoch)
	s.Count++
	s.Chain = NextChain(s.Chain, in.Seq, in.EventID)
	return s
}

// step is the model: the states the session may be in after the operation, given the state
// before it and what the client was answered (none: the answer is impossible there).
func step(s State, in Input, out Output) []State {
	switch kindOf(in.Kind) {
	case OpAppend:
		switch out.Status {
		case Ok:
			// Acknowledged: in the history from now on, once, at its seq, in its epoch
			// (a retry is answered with the first write's position).
			if s.holds(in.Seq, in.EventID, in.Epoch) {
				return []State{s}
			}
			if s.accepts(in) {
				return []State{s.appended(in)}
			}
			return nil
		case Refused:
			// Never in the history. Fenced: a claim of a later epoch came first.
			if out.Code == "fenced" && s.Epoch <= in.Epoch {
				return nil
			}
			return []State{s}
		default:
			// At most once: either it was never accepted, or it was, here, if it could be.
			if s.accepts(in) {
				return []State{s, s.appended(in)}
			}
			return []State{s}
		}
	case OpClaim, OpResume:
		switch out.Status {
		case Ok:
			// A later epoch, at the end of the history as it is.
			if out.Epoch <= s.Epoch || out.NextSeq != s.Count+1 {
				return nil
			}
			next := s
			next.Epoch = out.Epoch
			if kindOf(in.Kind) == OpClaim {
				next.Chain = NextChain(s.Chain, out.ClaimSeq, out.ClaimID)
			} else {
				next.Chain = out.Chain
			}
			return []State{next}
		case Refused:
			return []State{s}
		default:
			// A claim is written with the next epoch; its id was never answered.
			next := s
			next.Epoch = s.Epoch + 1
			next.Chain = ChainUnknown
			return []State{s, next}
		}
	case OpLogRead:
		// Read from the log to its end: the history exactly as it is, every acknowledged
		// append in it.
		if out.LastSeq != s.Count || out.Epoch != s.Epoch {
			return nil
		}
		if s.Chain != ChainUnknown && s.Chain != out.Chain {
			return nil
		}
		s.Chain = out.Chain
		return []State{s}
	case OpProjRead:
		// The projection may lag: a prefix of the history, never shorter than what this
		// reader saw before.
		n := uint64(out.Count)
		if n > s.Count || n < s.Seen[in.Reader] {
			return nil
		}
		if n > 0 && !strings.HasPrefix(s.Events+",", out.Events+",") {
			return nil
		}
		s.Seen[in.Reader] = n
		return []State{s}
	}
	return nil
}

// SessionModel is the model of one session's history, starting from init; every history
// handed to porcupine with it holds one session's operations.
func SessionModel(init State) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{init} },
		Step: func(state, input, output interface{}) []interface{} {
			var next []interface{}
			for _, s := range step(state.(State), input.(Input), output.(Output)) {
				next = append(next, s)
			}
			return next
		},
		Equal: func(a, b interface{}) bool { return a.(State) == b.(State) },
		Hash: func(state interface{}) uint64 {
			s := state.(State)
			h := fnv.New64a()
			fmt.Fprintf(h, "%s|%d|%s|%v", s.Events, s.Epoch, s.Chain, s.Seen)
			return h.Sum64()
		},
		DescribeOperation: describeOperation,
		DescribeState: func(state interface{}) string {
			s := state.(State)
			chain := s.Chain
			if len(chain) > 8 {
				chain = chain[:8]
			}
			return fmt.Sprintf("last seq %d, epoch %d, chain %s, readers saw %v", s.Count, s.Epoch, chain, s.Seen)
		},
	}
	return nm.ToModel()
}

func describeOperation(input, output interface{}) string {
	in, out := input.(Input), output.(Output)
	result := out.Status
	if out.Code != "" {
		result += " " + out.Code
	}
	switch kindOf(in.Kind) {
	case OpAppend:
		if out.Status == Ok {
			result = fmt.Sprintf("ok at %d/%d", out.Partition, out.Offset)
			if out.Duplicate {
				result += " (duplicate)"
			}
		}
		return fmt.Sprintf("c%d %s seq %d %s epoch %d -> %s", in.Client, in.Kind, in.Seq, short(in.EventID), in.Epoch, result)
	case OpClaim, OpResume:
		if out.Status == Ok {
			result = fmt.Sprintf("ok epoch %d next seq %d", out.Epoch, out.NextSeq)
		}
		return fmt.Sprintf("c%d %s -> %s", in.Client, in.Kind, result)
	case OpLogRead:
		return fmt.Sprintf("c%d log read -> last seq %d epoch %d chain %s", in.Client, out.LastSeq, out.Epoch, short(out.Chain))
	default:
		last := out.Events
		if i := strings.LastIndex(last, ","); i >= 0 {
			last = last[i+1:]
		}
		return fmt.Sprintf("c%d projection read (reader %d) -> %d events, last %s", in.Client, in.Reader, out.Count, last)
	}
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
