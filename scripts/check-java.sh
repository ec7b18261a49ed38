#!/usr/bin/env bash
# Spark needs a Java runtime (17 or newer). Say so plainly instead of a JVM stack trace.
set -euo pipefail
java_bin=java
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
  java_bin="$JAVA_HOME/bin/java"
fi
if ! command -v "$java_bin" >/dev/null 2>&1; then
  {
    echo "sparklog needs Java 17 or newer for Spark, and no \`java\` was found on PATH or in JAVA_HOME."
    echo "Install it, for example:  apt-get install -y openjdk-17-jre-headless   (Debian/Ubuntu)"
    echo "                          brew install openjdk@17                      (macOS)"
    echo "then run the command again."
  } >&2
  exit 1
fi
version=$("$java_bin" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
major=${version%%.*}
if [ "$major" = "1" ]; then major=$(echo "$version" | cut -d. -f2); fi
if ! [ "$major" -ge 17 ] 2>/dev/null; then
  echo "sparklog needs Java 17 or newer for Spark; found Java '$version' ($java_bin)." >&2
  exit 1
fi
