# Sourced by the benchmark scripts: `durable_qd32_reference FILE RUNTIME OUTPUT` runs fio's
# durable reference for QD32 writes on FILE (1 GiB, laid out already): 4 KiB random writes at
# QD32 with an fdatasync after every 32 (one engine record's worth), each page written once,
# RUNTIME seconds after a 2 s ramp, its JSON report in OUTPUT.
durable_qd32_reference() {
    fio --name=randwrite-4k-qd32-fdatasync32 --filename="$1" --size=1G \
        --rw=randwrite --bs=4k --iodepth=32 --fdatasync=32 --ioengine=libaio --direct=1 \
        --runtime="$2" --ramp_time=2 --time_based --output-format=json --output="$3" >/dev/null
}
