package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// API is the HTTP routes the clients use: ingest's (any instance serves any session) and
// recovery's.
type API struct {
	ingest   []string
	recovery string
	token    string
	http     *http.Client
	// The Rust library's writer door, when the run has one (--library).
	library *Library
}

func newAPI(ingest []string, recovery, token string) *API {
	transport := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	return &API{ingest: ingest, recovery: recovery, token: token, http: &http.Client{Timeout: 15 * time.Second, Transport: transport}}
}

// Opened is ingest's answer to a create or a claim.
type Opened struct {
	SessionID   string `json:"session_id"`
	Epoch       uint64 `json:"epoch"`
	WriterToken string `json:"writer_token"`
	NextSeq     uint64 `json:"next_seq"`
	Event       struct {
		Seq     uint64 `json:"seq"`
		EventID string `json:"event_id"`
	} `json:"event"`
}

type problem struct {
	Code        string `json:"code"`
	ExpectedSeq uint64 `json:"expected_seq"`
}

// call sends a request and sorts its outcome: a 2xx (body decoded into into), a 4xx refused
// with its code, a connection never opened (refused: nothing was sent), and anything else
// unknown: a 5xx, a timeout, a connection lost after the request went out.
func (a *API) call(method, url string, body interface{}, writerToken string, into interface{}) Output {
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			panic(err)
		}
		reader = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, reader)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if writerToken != "" {
		req.Header.Set("Sessionlog-Writer-Token", writerToken)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return Output{Status: Refused, Code: "not_sent"}
		}
		code := "connection lost"
		if strings.Contains(err.Error(), "Timeout") || strings.Contains(err.Error(), "deadline") {
			code = "timeout"
		}
		return Output{Status: Unknown, Code: code}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return Output{Status: Unknown, Code: "connection lost"}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if into != nil {
			if err := json.Unmarshal(raw, into); err != nil {
				return Output{Status: Unknown, Code: "undecodable answer: " + err.Error()}
			}
		}
		return Output{Status: Ok}
	}
	var p problem
	_ = json.Unmarshal(raw, &p)
	if p.Code == "" {
		p.Code = fmt.Sprintf("http %d", resp.StatusCode)
	}
	if resp.StatusCode >= 500 {
		return Output{Status: Unknown, Code: p.Code}
	}
	return Output{Status: Refused, Code: p.Code, NextSeq: p.ExpectedSeq}
}

func (a *API) create(agent string) (Opened, error) {
	var opened Opened
	out := a.call("POST", a.ingest[0]+"/v1/sessions", map[string]string{"agent": agent, "title": "checked history"}, "", &opened)
	if out.Status != Ok {
		// The other instance, in case the first is the one down.
		out = a.call("POST", a.ingest[len(a.ingest)-1]+"/v1/sessions", map[string]string{"agent": agent, "title": "checked history"}, "", &opened)
	}
	if out.Status != Ok {
		return opened, fmt.Errorf("create: %s %s", out.Status, out.Code)
	}
	return opened, nil
}

func (a *API) appendEvent(via int, in Input, writerToken string) Output {
	body := map[string]interface{}{
		"epoch": in.Epoch,
		"events": []map[string]interface{}{{
			"seq": in.Seq, "event_id": in.EventID, "kind": "UserRequest",
			"data": map[string]interface{}{"content": map[string]string{"Plain": fmt.Sprintf("checked %d", in.Seq)}},
		}},
	}
	var answer struct {
		NextSeq uint64 `json:"next_seq"`
		Events  []struct {
			Seq       uint64 `json:"seq"`
			EventID   string `json:"event_id"`
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
			Duplicate bool   `json:"duplicate"`
		} `json:"events"`
	}
	out := a.call("POST", fmt.Sprintf("%s/v1/sessions/%s/events", a.ingest[via], in.Session), body, writerToken, &answer)
	if out.Status == Ok {
		if len(answer.Events) != 1 || answer.Events[0].Seq != in.Seq || answer.Events[0].EventID != in.EventID {
			return Output{Status: Unknown, Code: fmt.Sprintf("an answer for another event: %+v", answer.Events)}
		}
		e := answer.Events[0]
		out.NextSeq, out.Partition, out.Offset, out.Duplicate = answer.NextSeq, e.Partition, e.Offset, e.Duplicate
	}
	return out
}

func (a *API) claim(via int, session, writer string) Output {
	var opened Opened
	out := a.call("POST", fmt.Sprintf("%s/v1/sessions/%s/claim", a.ingest[via], session), map[string]string{"writer": writer}, "", &opened)
	if out.Status == Ok {
		out.Epoch, out.NextSeq, out.ClaimSeq, out.ClaimID, out.token = opened.Epoch, opened.NextSeq, opened.Event.Seq, opened.Event.EventID, opened.WriterToken
	}
	return out
}

type sessionState struct {
	LastSeq uint64 `json:"last_seq"`
	Epoch   uint64 `json:"epoch"`
	History string `json:"history"`
}

func (a *API) resume(session, writer string) Output {
	var bundle struct {
		State       sessionState `json:"state"`
		Epoch       uint64       `json:"epoch"`
		WriterToken string       `json:"writer_token"`
		NextSeq     uint64       `json:"next_seq"`
	}
	out := a.call("POST", fmt.Sprintf("%s/v1/sessions/%s/resume", a.recovery, session), map[string]interface{}{"writer": writer, "context_tokens": 1000}, "", &bundle)
	if out.Status == Ok {
		out.Epoch, out.NextSeq, out.Chain, out.token = bundle.Epoch, bundle.NextSeq, bundle.State.History, bundle.WriterToken
	}
	return out
}

func (a *API) logRead(session string) Output {
	var view struct {
		Rebuilt struct {
			State sessionState `json:"state"`
		} `json:"rebuilt"`
	}
	out := a.call("GET", fmt.Sprintf("%s/v1/sessions/%s", a.recovery, session), nil, "", &view)
	if out.Status == Ok {
		s := view.Rebuilt.State
		out.LastSeq, out.Epoch, out.Chain = s.LastSeq, s.Epoch, s.History
	}
	return out
}

func (a *API) projRead(session string) Output {
	var page struct {
		Events []struct {
			Seq         uint64 `json:"seq"`
			EventID     string `json:"event_id"`
			WriterEpoch uint64 `json:"writer_epoch"`
		} `json:"events"`
		NextCursor *string `json:"next_cursor"`
	}
	out := a.call("GET", fmt.Sprintf("%s/v1/sessions/%s/events?limit=1000", a.recovery, session), nil, "", &page)
	if out.Status == Refused && out.Code == "unknown_session" {
		// Not projected yet: an empty prefix.
		return Output{Status: Ok}
	}
	if out.Status == Ok {
		if page.NextCursor != nil && *page.NextCursor != "" {
			return Output{Status: Unknown, Code: "more than one page"}
		}
		entries := make([]string, len(page.Events))
		for i, e := range page.Events {
			entries[i] = Entry(e.Seq, e.EventID, e.WriterEpoch)
		}
		out.Events, out.Count = strings.Join(entries, ","), len(entries)
	}
	return out
}
