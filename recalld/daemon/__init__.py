"""The background service: transcript tailer, need detection, judged queue."""
