"""What both backends hold alike: policy constants and pure helpers, no SQL dialect and no driver."""
