"""Small pieces every layer shares (errors, files, constants, logging); imports nothing upward."""
