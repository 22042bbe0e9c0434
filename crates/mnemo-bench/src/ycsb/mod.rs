//! YCSB core workloads driver (in progress).
