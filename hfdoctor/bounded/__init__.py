"""Readers and runners with limits: every byte count, deadline and memory bound hfdoctor keeps."""
