#!/bin/bash
# Restart a command whenever it exits (as runit does in calico-node's image).
# usage: supervise.sh CMD ARGS...   (kill the whole process group to stop it)
n=0
while :; do
  n=$((n+1))
  echo "=== supervise: start #$n $(date -u +%FT%T.%3NZ)"
  "$@"
  rc=$?
  echo "=== supervise: exit rc=$rc $(date -u +%FT%T.%3NZ)"
  sleep 1
done
