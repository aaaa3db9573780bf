"""Data: preparing, converting and checking the files each trainer reads."""
