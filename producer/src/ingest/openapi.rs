//! The OpenAPI 3.1 document of the ingest service, served at `/openapi.json`.
//!
//! Written by hand: the event model lives in `schemas/` without OpenAPI derives, and the
//! event payloads are its serde JSON form. A test keeps the paths equal to [`super::ROUTES`].

use serde_json::{Value, json};

/// The OpenAPI document.
pub fn openapi_document() -> Value {
    let problem = json!({ "$ref": "#/components/schemas/Problem" });
    let errors = |codes: &[&str]| -> Value {
        let mut out = serde_json::Map::new();
        for code in codes {
            out.insert(
                (*code).to_string(),
                json!({
                    "description": "refused; the body says why",
                    "content": { "application/json": { "schema": problem.clone() } }
                }),
            );
        }
        Value::Object(out)
    };
    let session_param = json!([{
        "name": "session_id", "in": "path", "required": true,
        "schema": { "type": "string", "format": "uuid" }
    }]);
    let ok = |description: &str, schema: &str| {
        json!({ "description": description,
                "content": { "application/json": { "schema": { "$ref": format!("#/components/schemas/{schema}") } } } })
    };
    let body = |schema: &str| {
        json!({ "required": true,
                "content": { "application/json": { "schema": { "$ref": format!("#/components/schemas/{schema}") } } } })
    };
    let with = |mut responses: Value, status: &str, response: Value| {
        if let Some(map) = responses.as_object_mut() {
            map.insert(status.to_string(), response);
        }
        responses
    };
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "sessionlog ingest",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Append durable agent-session events to the session log over HTTP. \
                Create or claim a session to get a writer epoch; append events with the seq you \
                expect (gap-free from 1) and an event_id, so that a retry is idempotent; every \
                answer carries the durable Kafka position (partition, offset). Bad input gets a \
                4xx with a Problem body."
        },
        "paths": {
            "/sessions": { "post": {
                "summary": "Start a new session (seq 1, epoch 1)",
                "requestBody": body("CreateRequest"),
                "responses": with(errors(&["400", "409", "413", "415", "422", "503"]), "201", ok("started", "Opened"))
            }},
            "/sessions/{session_id}/claim": { "post": {
                "summary": "Take a session over with the next epoch; fences every earlier writer",
                "parameters": session_param,
                "requestBody": body("ClaimRequest"),
                "responses": with(errors(&["400", "404", "409", "415", "422", "503"]), "200", ok("claimed", "Opened"))
            }},
            "/sessions/{session_id}/events": { "post": {
                "summary": "Append a batch of events, in order; idempotent on (seq, event_id)",
                "parameters": session_param,
                "requestBody": body("AppendRequest"),
                "responses": with(errors(&["400", "404", "409", "413", "415", "422", "503"]), "200", ok("appended", "Appended"))
            }},
            "/sessions/{session_id}/checkpoint": { "post": {
                "summary": "Append a checkpoint with the writer's state digest and confirm the writer was not fenced",
                "parameters": session_param,
                "requestBody": body("CheckpointRequest"),
                "responses": with(errors(&["400", "404", "409", "415", "422", "503"]), "200", ok("checkpointed", "EventAck"))
            }},
            "/sessions/{session_id}/close": { "post": {
                "summary": "Append the terminal outcome and release the session",
                "parameters": session_param,
                "requestBody": body("CloseRequest"),
                "responses": with(errors(&["400", "404", "409", "415", "422", "503"]), "200", ok("closed", "EventAck"))
            }},
            "/health": { "get": {
                "summary": "Liveness, the topic, the schema id, open sessions and events in flight",
                "responses": { "200": { "description": "serving", "content": { "application/json": { "schema": { "type": "object" } } } } }
            }},
            "/metrics": { "get": {
                "summary": "Prometheus metrics",
                "responses": { "200": { "description": "text exposition format", "content": { "text/plain": { "schema": { "type": "string" } } } } }
            }},
            "/openapi.json": { "get": {
                "summary": "This document",
                "responses": { "200": { "description": "OpenAPI 3.1", "content": { "application/json": { "schema": { "type": "object" } } } } }
            }}
        },
        "components": { "schemas": {
            "Problem": {
                "type": "object", "required": ["error", "message"],
                "properties": {
                    "error": { "type": "string", "description": "stable code: malformed_json, invalid_request, unknown_kind, invalid_event, reserved_kind, wrong_seq, seq_conflict, stale_epoch, lost_claim, session_ended, too_large, too_many_events, unknown_session, session_not_open, bad_session_id, ..." },
                    "message": { "type": "string", "description": "what is wrong" }
                },
                "additionalProperties": true
            },
            "CreateRequest": {
                "type": "object", "required": ["agent"], "additionalProperties": false,
                "properties": {
                    "agent": { "type": "string" },
                    "title": { "type": ["string", "null"] },
                    "session_id": { "type": ["string", "null"], "format": "uuid", "description": "default: a fresh UUIDv7" }
                }
            },
            "ClaimRequest": {
                "type": "object", "required": ["writer"], "additionalProperties": false,
                "properties": { "writer": { "type": "string", "description": "names the harness taking over" } }
            },
            "AppendRequest": {
                "type": "object", "required": ["epoch", "events"], "additionalProperties": false,
                "properties": {
                    "epoch": { "type": "integer", "minimum": 1, "description": "the epoch create or claim returned" },
                    "events": { "type": "array", "items": { "$ref": "#/components/schemas/Event" } }
                }
            },
            "Event": {
                "type": "object", "required": ["seq", "kind"], "additionalProperties": false,
                "properties": {
                    "seq": { "type": "integer", "minimum": 1, "description": "the next seq; a repeat of an accepted (seq, event_id) answers with the first write's position" },
                    "event_id": { "type": ["string", "null"], "format": "uuid", "description": "send one (UUIDv7) to make retries idempotent" },
                    "kind": { "type": "string", "enum": ["UserRequest", "ModelResponse", "ToolCallRequested", "ToolCallResult", "SteeringMessage", "PlanUpdated", "ApprovalRequested", "ApprovalDecided", "ResolutionRequired", "SessionPaused", "SessionResumed", "SessionEnded", "SessionErased"] },
                    "data": { "type": "object", "description": "the kind's fields as in schemas/avro/session-event.v*.avsc; content is {\"Plain\": \"text\"}, e.g. {\"content\": {\"Plain\": \"hi\"}} for UserRequest" },
                    "causation_id": { "type": ["string", "null"], "format": "uuid" },
                    "idempotency_key": { "type": ["string", "null"] },
                    "occurred_at": { "type": ["integer", "null"], "description": "microseconds since the Unix epoch; default: now" }
                }
            },
            "CheckpointRequest": {
                "type": "object", "required": ["epoch"], "additionalProperties": false,
                "properties": { "epoch": { "type": "integer" }, "workspace_revision": { "type": ["string", "null"] } }
            },
            "CloseRequest": {
                "type": "object", "required": ["epoch", "outcome"], "additionalProperties": false,
                "properties": {
                    "epoch": { "type": "integer" },
                    "outcome": { "type": "string", "enum": ["Completed", "Failed", "Cancelled"] },
                    "reason": { "type": ["string", "null"] }
                }
            },
            "EventAck": {
                "type": "object", "required": ["seq", "event_id", "partition", "offset", "duplicate"],
                "properties": {
                    "seq": { "type": "integer" }, "event_id": { "type": "string", "format": "uuid" },
                    "partition": { "type": "integer" }, "offset": { "type": "integer" },
                    "duplicate": { "type": "boolean", "description": "a retry: the position is the first write's" }
                }
            },
            "Opened": {
                "type": "object", "required": ["session_id", "epoch", "next_seq", "event"],
                "properties": {
                    "session_id": { "type": "string", "format": "uuid" },
                    "epoch": { "type": "integer", "description": "send it with every write" },
                    "next_seq": { "type": "integer" },
                    "event": { "$ref": "#/components/schemas/EventAck" }
                }
            },
            "Appended": {
                "type": "object", "required": ["session_id", "next_seq", "events"],
                "properties": {
                    "session_id": { "type": "string", "format": "uuid" },
                    "next_seq": { "type": "integer" },
                    "events": { "type": "array", "items": { "$ref": "#/components/schemas/EventAck" } }
                }
            }
        }}
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn documents_exactly_the_served_routes() {
        let doc = openapi_document();
        let documented: BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .into_iter()
            .flatten()
            .flat_map(|(path, ops)| {
                ops.as_object()
                    .into_iter()
                    .flatten()
                    .map(move |(method, _)| (method.clone(), path.clone()))
            })
            .collect();
        let served: BTreeSet<(String, String)> = super::super::ROUTES
            .iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        assert_eq!(documented, served);
    }

    #[test]
    fn every_reference_resolves() {
        let doc = openapi_document();
        let text = doc.to_string();
        for reference in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = reference.split('"').next().unwrap_or_default();
            assert!(
                doc["components"]["schemas"].get(name).is_some(),
                "dangling $ref {name}"
            );
        }
    }
}
