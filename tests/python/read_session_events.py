"""Reads a topic of session events with Confluent's own Python client and AvroDeserializer.

A client we did not write must read our events: this decodes every record through the schema
registry (Confluent wire format) and prints one JSON object per record on stdout.

usage: read_session_events.py BOOTSTRAP REGISTRY_URL TOPIC EXPECTED_COUNT
"""

import json
import sys
import time

from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext


def main() -> int:
    bootstrap, registry_url, topic, expected = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    # Without a timeout the client can wait forever on a registry connection that never
    # answers (seen once after a broker restart); with one, it retries the request.
    registry = SchemaRegistryClient({"url": registry_url, "timeout": 10})
    # return_record_name: a union of records comes back as (record name, record),
    # which tells us the event kind.
    deserialize = AvroDeserializer(registry, return_record_name=True)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"python-interop-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    records = []
    deadline = time.monotonic() + 60
    try:
        while len(records) < expected and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error():
                raise RuntimeError(str(message.error()))
            value = deserialize(message.value(), SerializationContext(topic, MessageField.VALUE))
            kind, body = value["event"]
            records.append(
                {
                    "key": message.key().decode(),
                    "partition": message.partition(),
                    "offset": message.offset(),
                    "schema_id": int.from_bytes(message.value()[1:5], "big"),
                    "event_id": str(value["event_id"]),
                    "session_id": str(value["session_id"]),
                    "seq": value["seq"],
                    "writer_epoch": value["writer_epoch"],
                    "kind": kind.rsplit(".", 1)[-1],
                    "event": body,
                }
            )
    finally:
        consumer.close()
    for record in records:
        print(json.dumps(record, default=str))
    return 0 if len(records) == expected else 1


if __name__ == "__main__":
    sys.exit(main())
