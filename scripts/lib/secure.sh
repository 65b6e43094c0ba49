# The `--secure` parts of scripts/stack: a private CA and node certificate, generated passwords, Kafka SASL_SSL +
# SCRAM-SHA-512 + ACLs, Cassandra PasswordAuthenticator + client TLS, Apicurio HTTP basic auth. Sourced by
# scripts/stack after lib/common.sh; uses its STACK_DIR, SECRETS_DIR, RUN_DIR, LOG_DIR, JAVA17, kafka_probe, ...
# shellcheck shell=bash
#
# Secrets live in $SECRETS_DIR (mode 700, files 600) and survive `down`, so clients keep the same CA and passwords
# across restarts; delete the directory to get new ones. No password is ever put on a command line (ps shows those)
# or in a log: tools get them through files (Java @argfiles, client property files, curl -K) or the environment.

NODE_CN=sessionlog-node          # the one server certificate (all nodes run on 127.0.0.1); Kafka super user
KAFKA_SUPER_USERS="User:admin;User:CN=$NODE_CN"
EVENTS_TOPIC_PREFIX=session-events
SERVICE_GROUP_PREFIX=sessionlog-
CQL_DRIVER=scylla-driver==3.29.12   # wheels for CPython 3.8-3.13; the project's Rust client is scylla too

# 24 alphanumerics (~143 bits). No commas, quotes or '&': they would break StorageTool's --add-scram parsing,
# the JAAS line or the sed-based template renderer.
gen_pw() { local p; p="$(head -c 48 /dev/urandom | base64 -w0 | tr -dc 'A-Za-z0-9')"; printf '%s' "${p:0:24}"; }

# Generates what is missing in $SECRETS_DIR and sources the passwords into the shell (not exported).
ensure_secrets() {
  mkdir -p "$SECRETS_DIR"; chmod 700 "$SECRETS_DIR"
  if [[ ! -s "$SECRETS_DIR/passwords" ]]; then
    log "generating passwords in $SECRETS_DIR/passwords (mode 600)"
    local k
    (
      umask 077
      for k in STORE KAFKA_ADMIN KAFKA_SESSIONLOG KAFKA_HARNESS KAFKA_REGISTRY CQL_SUPER CQL_SESSIONLOG \
               REGISTRY_ADMIN REGISTRY_SESSIONLOG; do
        printf '%s_PW=%s\n' "$k" "$(gen_pw)"
      done >"$SECRETS_DIR/passwords.tmp"
      mv "$SECRETS_DIR/passwords.tmp" "$SECRETS_DIR/passwords"
    )
    rm -f "$SECRETS_DIR/node.p12"   # its store password just changed
  fi
  # shellcheck disable=SC1091
  source "$SECRETS_DIR/passwords"
  [[ -s "$SECRETS_DIR/node.p12" && -s "$SECRETS_DIR/ca.pem" ]] || make_certs
  write_client_configs
}

keytool_bin() { local k; k="$(dirname "$(readlink -f "$JAVA17")")/keytool"; [[ -x "$k" ]] && echo "$k" || echo keytool; }

# A CA (EC P-256, 10 years) and one node certificate signed by it with SAN IP:127.0.0.1,DNS:localhost (librdkafka,
# Java clients, Python ssl and the scylla/rustls driver all check the IP) and EKU server+client (Kafka's controller
# listener uses it for mTLS both ways). Key usages are set explicitly: strict verifiers (rustls/webpki, OpenSSL's
# X509_STRICT) reject a CA without keyCertSign.
make_certs() {
  local d="$SECRETS_DIR" kt; kt="$(keytool_bin)"
  log "creating a CA and a node certificate in $d"
  rm -f "$d"/ca.p12 "$d"/ca.pem "$d"/node.p12 "$d"/node.pem
  (
    umask 077
    export STORE_PW   # keytool reads it via -storepass:env; only keytool children see it
    "$kt" -genkeypair -alias ca -keyalg EC -groupname secp256r1 -dname "CN=sessionlog-stack-ca" -validity 3650 \
      -ext bc:c -ext KU:c=keyCertSign,cRLSign -keystore "$d/ca.p12" -storetype PKCS12 \
      -storepass:env STORE_PW -keypass:env STORE_PW -noprompt
    "$kt" -exportcert -rfc -alias ca -keystore "$d/ca.p12" -storepass:env STORE_PW -file "$d/ca.pem"
    "$kt" -genkeypair -alias node -keyalg EC -groupname secp256r1 -dname "CN=$NODE_CN" -validity 3650 \
      -keystore "$d/node.p12" -storetype PKCS12 -storepass:env STORE_PW -keypass:env STORE_PW -noprompt
    "$kt" -certreq -alias node -keystore "$d/node.p12" -storepass:env STORE_PW |
      "$kt" -gencert -alias ca -keystore "$d/ca.p12" -storepass:env STORE_PW -rfc -validity 3650 \
        -ext SAN=IP:127.0.0.1,DNS:localhost -ext EKU=serverAuth,clientAuth -ext KU:c=digitalSignature,keyAgreement \
        -outfile "$d/node.pem"
    # The CA first, so the signed reply is stored with its full chain.
    "$kt" -importcert -alias ca -file "$d/ca.pem" -keystore "$d/node.p12" -storepass:env STORE_PW -noprompt
    "$kt" -importcert -alias node -file "$d/node.pem" -keystore "$d/node.p12" -storepass:env STORE_PW -noprompt
  ) >>"$LOG_DIR/secrets.log" 2>&1 || { tail -20 "$LOG_DIR/secrets.log" >&2; die "keytool failed (see $LOG_DIR/secrets.log)"; }
  chmod 644 "$d/ca.pem"   # public; clients read it
}

# Java client configs for Kafka's own tools (admin = super user, used for probes and ACLs). The CA is given as a
# PEM truststore, so no truststore password is needed.
write_client_configs() {
  local u pw
  for u in admin sessionlog harness registry; do
    case "$u" in admin) pw="$KAFKA_ADMIN_PW" ;; sessionlog) pw="$KAFKA_SESSIONLOG_PW" ;;
      harness) pw="$KAFKA_HARNESS_PW" ;; registry) pw="$KAFKA_REGISTRY_PW" ;; esac
    (
      umask 077
      cat >"$SECRETS_DIR/kafka-$u.properties" <<EOF
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$u" password="$pw";
ssl.truststore.type=PEM
ssl.truststore.location=$SECRETS_DIR/ca.pem
EOF
    )
  done
}

# ---- Kafka ----------------------------------------------------------------------------------------------------
# The plain node config with its listener lines replaced by the secure ones (stack.d/kafka-node-secure.properties.tmpl).
secure_kafka_config() {   # cfg client_port controller_port
  local cfg="$1" tmp; tmp="$(mktemp "$cfg.XXXX")"
  (
    umask 077
    grep -vE '^(listeners|advertised\.listeners|inter\.broker\.listener\.name|listener\.security\.protocol\.map)=' \
      "$cfg" >"$tmp"
    render "$TEMPLATES_DIR/kafka-node-secure.properties.tmpl" "$tmp.secure" CLIENT_PORT="$2" CONTROLLER_PORT="$3" \
      ADMIN_PW="$KAFKA_ADMIN_PW" STORE_PW="$STORE_PW" KEYSTORE="$SECRETS_DIR/node.p12" CA_PEM="$SECRETS_DIR/ca.pem" \
      SUPER_USERS="$KAFKA_SUPER_USERS"
    cat "$tmp.secure" >>"$tmp"; rm -f "$tmp.secure"
  )
  mv "$tmp" "$cfg"; chmod 600 "$cfg"
}

# StorageTool's extra arguments: every SCRAM user, written into the bootstrap metadata at format time (the same on
# every node). They go into a Java @argfile, not onto the command line.
scram_format_argfile() {   # file
  (
    umask 077
    printf '%s\n' --add-scram "SCRAM-SHA-512=[name=admin,password=$KAFKA_ADMIN_PW]" \
      --add-scram "SCRAM-SHA-512=[name=sessionlog,password=$KAFKA_SESSIONLOG_PW]" \
      --add-scram "SCRAM-SHA-512=[name=harness,password=$KAFKA_HARNESS_PW]" \
      --add-scram "SCRAM-SHA-512=[name=registry,password=$KAFKA_REGISTRY_PW]" >"$1"
  )
}

# ACLs (idempotent; re-adding an ACL is a no-op), set once per `up` after Kafka answers:
#  sessionlog: the services. Topics prefixed session-events (events, DLQ): create, read, write, describe(+configs);
#              groups prefixed sessionlog-: read, describe.
#  harness:    only writes to topics prefixed session-events (Write implies Describe).
#  registry:   Apicurio's KafkaSQL storage: topics prefixed kafkasql- and registry-events, any consumer group (its
#              group ids are generated).
kafka_setup_acls() {   # bootstrap
  local b="$1" cc="$SECRETS_DIR/kafka-admin.properties"
  acl() { kafka_probe org.apache.kafka.tools.AclCommand --bootstrap-server "$b" --command-config "$cc" --add "$@" \
            >>"$LOG_DIR/acls.log" 2>&1 || { tail -20 "$LOG_DIR/acls.log" >&2; die "AclCommand failed (see $LOG_DIR/acls.log)"; }; }
  acl --allow-principal User:sessionlog --resource-pattern-type prefixed --topic "$EVENTS_TOPIC_PREFIX" \
    --operation Create --operation Read --operation Write --operation Describe --operation DescribeConfigs
  acl --allow-principal User:sessionlog --resource-pattern-type prefixed --group "$SERVICE_GROUP_PREFIX" \
    --operation Read --operation Describe
  acl --allow-principal User:harness --resource-pattern-type prefixed --topic "$EVENTS_TOPIC_PREFIX" --operation Write
  acl --allow-principal User:registry --resource-pattern-type prefixed --topic kafkasql- --topic registry-events \
    --operation All
  acl --allow-principal User:registry --group '*' --operation Read --operation Describe
}

# ---- Apicurio Registry ----------------------------------------------------------------------------------------
# Quarkus reads <cwd>/config/application.properties, so the secrets go there (mode 600) and not into -D options.
write_registry_config() {   # bootstrap
  local dir="$STACK_DIR/registry/config"
  mkdir -p "$dir"
  (
    umask 077
    render "$TEMPLATES_DIR/registry-secure.properties.tmpl" "$dir/application.properties" \
      KAFKA_PW="$KAFKA_REGISTRY_PW" CA_PEM="$SECRETS_DIR/ca.pem" \
      ADMIN_PW="$REGISTRY_ADMIN_PW" SESSIONLOG_PW="$REGISTRY_SESSIONLOG_PW"
  )
}
# curl with basic auth from a config on a pipe (never argv). Prints the HTTP status.
registry_http_status() {   # url [user]
  local user="${2:-}" pw=""
  case "$user" in admin) pw="$REGISTRY_ADMIN_PW" ;; sessionlog) pw="$REGISTRY_SESSIONLOG_PW" ;; esac
  if [[ -n "$user" ]]; then
    curl -s -o /dev/null -w '%{http_code}' --max-time 5 -K <(printf 'user = "%s:%s"\n' "$user" "$pw") "$1" 2>/dev/null
  else
    curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$1" 2>/dev/null
  fi
}

# ---- Cassandra ------------------------------------------------------------------------------------------------
secure_cassandra_config() {   # yaml
  (
    umask 077
    render "$TEMPLATES_DIR/cassandra-secure.yaml.tmpl" "$1.secure" KEYSTORE="$SECRETS_DIR/node.p12" STORE_PW="$STORE_PW"
    cat "$1.secure" >>"$1"; rm -f "$1.secure"
  )
  chmod 600 "$1"
}

# A small venv with the CQL driver, cached beside the downloads (separate from scripts/python-env's venv so the
# secure stack never rebuilds the one other tests use). Locked like the downloads.
CQL_VENV="$CACHE_DIR/cql-venv"
ensure_cql_venv() {
  [[ -x "$CQL_VENV/bin/python" && "$(cat "$CQL_VENV/.sessionlog-reqs" 2>/dev/null)" == "$CQL_DRIVER" ]] && return 0
  with_cache_lock cql-venv _make_cql_venv
}
_make_cql_venv() {
  [[ -x "$CQL_VENV/bin/python" && "$(cat "$CQL_VENV/.sessionlog-reqs" 2>/dev/null)" == "$CQL_DRIVER" ]] && return 0
  log "creating $CQL_VENV with $CQL_DRIVER (once)"
  command -v python3 >/dev/null || die "python3 is needed for the CQL role setup (apt-get install python3 python3-venv)"
  rm -rf "$CQL_VENV"
  { python3 -m venv "$CQL_VENV" >&2 && "$CQL_VENV/bin/pip" install -q --disable-pip-version-check "$CQL_DRIVER" >&2; } ||
    { rm -rf "$CQL_VENV"; die "installing $CQL_DRIVER into $CQL_VENV failed"; }
  echo "$CQL_DRIVER" >"$CQL_VENV/.sessionlog-reqs"
}

# Runs CQL as `user` over TLS (CA-verified, hostname = 127.0.0.1). Statements come on stdin, one per line; the
# password comes in the environment. Exit 0 = logged in and all ran, 2 = authentication refused, 1 = other error.
CQL_PY='
import os, ssl, sys, logging
logging.disable(logging.CRITICAL)  # the driver logs reconnect noise; the exit code says what happened
from cassandra.cluster import Cluster, NoHostAvailable
from cassandra.auth import PlainTextAuthProvider
from cassandra import AuthenticationFailed
secrets = [v for v in os.environ.get("CQL_REDACT", "").split() + [os.environ.get("CQL_PW", "")] if v]
def say(msg):  # server error messages may quote a statement; passwords never reach the log
    for v in secrets: msg = msg.replace(v, "***")
    print(msg)
ctx = None
if os.environ.get("CQL_CA"):
    ctx = ssl.create_default_context(cafile=os.environ["CQL_CA"])   # verifies the chain and the IP SAN
user = os.environ.get("CQL_USER")
auth = PlainTextAuthProvider(user, os.environ.get("CQL_PW", "")) if user else None
c = Cluster([os.environ["CQL_HOST"]], port=int(os.environ["CQL_PORT"]), auth_provider=auth, ssl_context=ctx,
            connect_timeout=5, control_connection_timeout=5, protocol_version=4)
try:
    s = c.connect()
    for line in sys.stdin.read().splitlines():
        if line.strip():
            s.execute(line, timeout=15)
    say("ok")
except NoHostAvailable as e:
    errs = list(e.errors.values())
    say("refused: " + "; ".join(type(x).__name__ + ": " + str(x)[:160] for x in errs))
    sys.exit(2 if any(isinstance(x, AuthenticationFailed) for x in errs) else 1)
except AuthenticationFailed as e:
    say("refused: AuthenticationFailed"); sys.exit(2)
except Exception as e:
    say("error: " + type(e).__name__ + ": " + str(e)[:200]); sys.exit(1)
finally:
    c.shutdown()
'
cql_as() {   # user(|"") password ca(|"") port   -- statements on stdin; prints one status line
  CQL_USER="$1" CQL_PW="$2" CQL_CA="$3" CQL_HOST=127.0.0.1 CQL_PORT="$4" \
    CQL_REDACT="${CQL_SUPER_PW:-} ${CQL_SESSIONLOG_PW:-}" \
    timeout 60 "$CQL_VENV/bin/python" -c "$CQL_PY"
}

# Roles, done once the node accepts TLS connections: log in as the default superuser (password `cassandra` on a
# fresh node, ours after the first run; Cassandra creates it superuser_setup_delay_ms after startup, so early
# attempts fail and are retried), create the sessionlog role, then change the superuser's password. Cassandra 5
# refuses a second password change of a role within 5 s ("can only be changed every 5000ms"), so each statement
# is idempotent and the whole set is simply retried on the next poll. Ready = `sessionlog` AND the superuser with
# its new password both log in over TLS (so a half-done setup never counts as ready).
cassandra_roles_ready() {
  local port ca="$SECRETS_DIR/ca.pem" out="$LOG_DIR/cql-setup.log" probe="SELECT release_version FROM system.local"
  local pw=cassandra
  port="$(main_port cassandra)"
  if echo "$probe" | cql_as cassandra "$CQL_SUPER_PW" "$ca" "$port" >>"$out" 2>&1; then
    echo "$probe" | cql_as sessionlog "$CQL_SESSIONLOG_PW" "$ca" "$port" >>"$out" 2>&1 && return 0
    pw="$CQL_SUPER_PW"
  fi
  # CREATE ON ALL KEYSPACES: the services and tests create (and drop) their own keyspaces; Cassandra gives the
  # creator all permissions on what it creates.
  cql_as cassandra "$pw" "$ca" "$port" >>"$out" 2>&1 <<EOF
CREATE ROLE IF NOT EXISTS sessionlog WITH PASSWORD = '$CQL_SESSIONLOG_PW' AND LOGIN = true
GRANT CREATE ON ALL KEYSPACES TO sessionlog
ALTER ROLE cassandra WITH PASSWORD = '$CQL_SUPER_PW'
EOF
  return 1   # the next poll checks both logins (the auth caches may still hold the old password for ~2 s)
}

# A TLS CQL OPTIONS handshake (the plain probe fails under TLS): the node listens and speaks CQL over TLS, with a
# certificate the CA vouches for. -brief closes the connection at stdin's end, hence the bounded pause for the reply.
cql_tls_handshake() {
  local got
  got="$({ printf '\x04\x00\x00\x00\x05\x00\x00\x00\x00'; sleep 2; } |
    timeout 6 openssl s_client -brief -verify_return_error -CAfile "$SECRETS_DIR/ca.pem" -verify_ip 127.0.0.1 \
      -connect "127.0.0.1:$(main_port cassandra)" 2>/dev/null | head -c 5 | od -An -tx1 | tr -d ' \n')" || true
  [[ "$got" == 8400000006 ]]
}

write_secure_env() {   # brokers
  (
    umask 077
    cat >"$STACK_DIR/stack.env.tmp" <<EOF
# Written by scripts/stack up --secure; source it:  . $STACK_DIR/stack.env   (mode 600: it holds passwords)
SESSIONLOG_KAFKA__BOOTSTRAP=$(kafka_bootstrap "$1")
SESSIONLOG_KAFKA_BROKERS=$1
SESSIONLOG_KAFKA__LIBRDKAFKA__SECURITY_PROTOCOL=SASL_SSL
SESSIONLOG_KAFKA__LIBRDKAFKA__SASL_MECHANISM=SCRAM-SHA-512
SESSIONLOG_KAFKA__LIBRDKAFKA__SASL_USERNAME=sessionlog
SESSIONLOG_KAFKA__LIBRDKAFKA__SASL_PASSWORD=$KAFKA_SESSIONLOG_PW
SESSIONLOG_KAFKA__LIBRDKAFKA__SSL_CA_LOCATION=$SECRETS_DIR/ca.pem
SESSIONLOG_REGISTRY__URL=$REGISTRY_URL
SESSIONLOG_REGISTRY__USERNAME=sessionlog
SESSIONLOG_REGISTRY__PASSWORD=$REGISTRY_SESSIONLOG_PW
SESSIONLOG_CQL__NODES=127.0.0.1:$(main_port cassandra)
SESSIONLOG_CQL__USERNAME=sessionlog
SESSIONLOG_CQL__PASSWORD=$CQL_SESSIONLOG_PW
SESSIONLOG_CQL__TLS_CA_FILE=$SECRETS_DIR/ca.pem
# Not service settings: for a test tier that plays the harness (write-only on $EVENTS_TOPIC_PREFIX*) and for
# Kafka's Java tools (client property files per principal: kafka-admin|sessionlog|harness.properties).
SESSIONLOG_STACK_SECURE=1
SESSIONLOG_STACK_SECRETS=$SECRETS_DIR
SESSIONLOG_STACK_HARNESS_KAFKA_USERNAME=harness
SESSIONLOG_STACK_HARNESS_KAFKA_PASSWORD=$KAFKA_HARNESS_PW
EOF
    mv "$STACK_DIR/stack.env.tmp" "$STACK_DIR/stack.env"
  )
}
# stack.env with every password replaced, for the terminal.
show_env_masked() { sed -E 's/^([A-Z_]*PASSWORD)=.*/\1=<hidden; see the file>/' "$STACK_DIR/stack.env"; }
