"""Private machinery of persist: state, transitions, the retry machine, parts."""
