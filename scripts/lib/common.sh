# Shared by scripts/stack, scripts/kafka-tool and scripts/python-env. Source it; it defines no side effects
# beyond variables and functions.
# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables are used by the scripts that source this file

# ---- versions (see the comment block at the top of scripts/stack for why these) ----------------------------
KAFKA_VERSION=4.4.0
# Kafka 4.4.0 still resolves slf4j-api 1.7.36 and log4j-core 2.25.5; the slf4j->log4j2 binding is "releaseOnly"
# in Kafka's build (in the tarball, not in the POM), so we add the 1.7 binding at log4j-core's version ourselves.
KAFKA_LOG4J_VERSION=2.25.5
APICURIO_VERSION=3.3.3
CASSANDRA_VERSION=5.0.8
DEP_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1   # Maven 3.8.7's default (2.8) is too old

# ---- paths --------------------------------------------------------------------------------------------------
SCRIPTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_DIR="$(cd "$SCRIPTS_DIR/.." && pwd)"
TEMPLATES_DIR="$SCRIPTS_DIR/stack.d"
CACHE_DIR="${SESSIONLOG_CACHE:-$HOME/.cache/sessionlog}"
STACK_DIR="${SESSIONLOG_STACK_DIR:-$REPO_DIR/.stack}"

KAFKA_HOME="$CACHE_DIR/kafka-$KAFKA_VERSION"
CASSANDRA_HOME="$CACHE_DIR/cassandra-$CASSANDRA_VERSION"
APICURIO_HOME="$CACHE_DIR/apicurio-registry-$APICURIO_VERSION"

# ---- messages -----------------------------------------------------------------------------------------------
log()  { printf '[stack] %s\n' "$*" >&2; }
warn() { printf '[stack] WARNING: %s\n' "$*" >&2; }
die()  { printf '[stack] ERROR: %s\n' "$*" >&2; exit 1; }

# ---- java / maven -------------------------------------------------------------------------------------------
# Major version of a java binary ("17", "25"), or empty if it does not run.
java_major() {
  "$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = \([0-9]*\).*/\1/p' | head -1
}

# Java for Kafka and Cassandra. Cassandra 5.0 supports only Java 11 and 17 (and 18+ breaks on
# System::setSecurityManager), so we insist on 17, preferring JAVA_HOME, then PATH, then the Debian location.
find_java17() {
  local c
  for c in ${JAVA_HOME:+"$JAVA_HOME/bin/java"} "$(command -v java 2>/dev/null || true)" /usr/lib/jvm/java-17-openjdk-*/bin/java; do
    [[ -n "$c" && -x "$c" ]] || continue
    if [[ "$(java_major "$c")" == 17 ]]; then printf '%s\n' "$c"; return 0; fi
  done
  return 1
}

require_java17() {
  JAVA17="$(find_java17)" || die "Java 17 not found (Kafka 4.x and Cassandra 5.0 need exactly 17 here).
  Install it with:  apt-get install openjdk-17-jdk-headless maven"
}

require_mvn() {
  command -v mvn >/dev/null 2>&1 || die "mvn not found; it is needed once to download the server jars from Maven Central.
  Install it with:  apt-get install openjdk-17-jdk-headless maven"
}

# Runs the dependency plugin in $1 (a dir holding pom.xml). On failure shows Maven's own error and names the
# artifact, since "BUILD FAILURE" alone does not say which download broke.
mvn_fetch() {
  local dir="$1" what="$2"; shift 2
  require_mvn
  local out="$dir/mvn-fetch.log"
  if ! (cd "$dir" && mvn -B -ntp "$@" >"$out" 2>&1); then
    grep -E '^\[ERROR\]' "$out" | head -20 >&2 || tail -30 "$out" >&2
    die "download of $what failed (full Maven output: $out)"
  fi
}

# Serialises downloads into the shared cache: two stacks (e.g. the plain one and a --secure one, or two checkouts)
# may run `up` at the same time, and an unlocked second fetch would `rm -rf` the first one's half-done download.
# The lock is taken only when the `.complete` marker is missing, and the marker is checked again under it.
with_cache_lock() {   # name command...
  local name="$1" fd; shift
  mkdir -p "$CACHE_DIR"
  exec {fd}>"$CACHE_DIR/.$name.lock"
  if ! flock -w 1800 "$fd"; then exec {fd}>&-; die "waited 30 min for another download of $name in $CACHE_DIR"; fi
  "$@"   # not under `||`: the fetch steps rely on set -e
  exec {fd}>&-
}

# Downloads the Kafka broker + tools jars into $KAFKA_HOME/libs once. The `.complete` marker is written last, so
# an interrupted download is retried instead of being taken for a finished one.
fetch_kafka() {
  [[ -f "$KAFKA_HOME/.complete" ]] && return 0
  with_cache_lock kafka _fetch_kafka
}
_fetch_kafka() {
  [[ -f "$KAFKA_HOME/.complete" ]] && return 0   # another process finished it while we waited for the lock
  log "downloading Apache Kafka $KAFKA_VERSION jars (once) into $KAFKA_HOME"
  rm -rf "$KAFKA_HOME"; mkdir -p "$KAFKA_HOME"
  # connect-runtime (Jetty, Jersey, ...) is excluded: kafka-tools declares it but ProducerPerformance,
  # ConsumerPerformance, TopicCommand and MetadataQuorumCommand were checked to run without it.
  cat >"$KAFKA_HOME/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.sessionlog.stack</groupId><artifactId>kafka-dist</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version>
      <exclusions><exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId></exclusion></exclusions>
    </dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>$KAFKA_LOG4J_VERSION</version></dependency>
  </dependencies>
</project>
EOF
  mvn_fetch "$KAFKA_HOME" "org.apache.kafka:kafka_2.13:$KAFKA_VERSION (+ kafka-tools, log4j-slf4j-impl)" \
    "$DEP_PLUGIN:copy-dependencies" -DoutputDirectory=libs -DincludeScope=runtime
  # Guard the logging binding: slf4j 1.7 needs log4j-slf4j-impl, slf4j 2.x would need log4j-slf4j2-impl.
  # A mismatch does not break the broker but silently drops every log line, which makes readiness failures opaque.
  if compgen -G "$KAFKA_HOME/libs/slf4j-api-2.*" >/dev/null; then
    die "Kafka $KAFKA_VERSION resolved slf4j-api 2.x: switch log4j-slf4j-impl to log4j-slf4j2-impl in scripts/lib/common.sh"
  fi
  ls "$KAFKA_HOME/libs/log4j-core-$KAFKA_LOG4J_VERSION.jar" >/dev/null 2>&1 ||
    warn "log4j-core is not $KAFKA_LOG4J_VERSION any more: $(cd "$KAFKA_HOME/libs" && echo log4j-core-*); align KAFKA_LOG4J_VERSION"
  touch "$KAFKA_HOME/.complete"
}

fetch_cassandra() {
  [[ -f "$CASSANDRA_HOME/.complete" ]] && return 0
  with_cache_lock cassandra _fetch_cassandra
}
_fetch_cassandra() {
  [[ -f "$CASSANDRA_HOME/.complete" ]] && return 0   # another process finished it while we waited for the lock
  log "downloading Apache Cassandra $CASSANDRA_VERSION jars (once) into $CASSANDRA_HOME"
  rm -rf "$CASSANDRA_HOME"; mkdir -p "$CASSANDRA_HOME"
  cat >"$CASSANDRA_HOME/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.sessionlog.stack</groupId><artifactId>cassandra-dist</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.cassandra</groupId><artifactId>cassandra-all</artifactId><version>$CASSANDRA_VERSION</version></dependency>
  </dependencies>
</project>
EOF
  mvn_fetch "$CASSANDRA_HOME" "org.apache.cassandra:cassandra-all:$CASSANDRA_VERSION" \
    "$DEP_PLUGIN:copy-dependencies" -DoutputDirectory=libs -DincludeScope=runtime
  touch "$CASSANDRA_HOME/.complete"
}

# Apicurio ships its runnable Quarkus fast-jar only as the attached `tar.gz` classifier `all`.
fetch_apicurio() {
  [[ -f "$APICURIO_HOME/.complete" ]] && return 0
  with_cache_lock apicurio _fetch_apicurio
}
_fetch_apicurio() {
  [[ -f "$APICURIO_HOME/.complete" ]] && return 0   # another process finished it while we waited for the lock
  log "downloading Apicurio Registry $APICURIO_VERSION (once) into $APICURIO_HOME"
  rm -rf "$APICURIO_HOME"; mkdir -p "$APICURIO_HOME/dist"
  cat >"$APICURIO_HOME/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.sessionlog.stack</groupId><artifactId>apicurio-dist</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>io.apicurio</groupId><artifactId>apicurio-registry-app</artifactId><version>$APICURIO_VERSION</version>
      <type>tar.gz</type><classifier>all</classifier>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>
    </dependency>
  </dependencies>
</project>
EOF
  mvn_fetch "$APICURIO_HOME" "io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all" \
    "$DEP_PLUGIN:copy-dependencies" -DoutputDirectory=download -DexcludeTransitive=true
  tar xzf "$APICURIO_HOME/download/apicurio-registry-app-$APICURIO_VERSION-all.tar.gz" -C "$APICURIO_HOME/dist" ||
    die "could not unpack the Apicurio archive in $APICURIO_HOME/download"
  rm -rf "$APICURIO_HOME/download"   # ~150 MB; ~/.m2 keeps a copy anyway
  [[ -f "$APICURIO_HOME/dist/quarkus-run.jar" ]] || die "Apicurio archive has no quarkus-run.jar (layout changed?)"
  touch "$APICURIO_HOME/.complete"
}
