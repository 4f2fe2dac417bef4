"""torch's eager LayerNorm / RMSNorm forward kernel (one 128-thread block per row, the row read twice): its HBM
bytes against a closed form worked out here from the launch and the chip's L2."""
from mhlo_cost.roofline.eager import torch_norm_bytes


def test_rows_that_stay_in_l2_are_read_once():
    # H200: 132 SMs x (2048 / 128) = 2112 rows in flight; 4096 bf16 columns = 8 KiB a row -> 17.3 MB, under the
    # 25 MiB half of the 50 MiB L2: input once, output once.
    assert torch_norm_bytes(16384, 4096, 2, "h200-sxm") == (2 * 16384 * 4096 * 2, 0)


def test_wide_rows_are_read_again_from_hbm():
    # H100, f32, 4096 x 16384: 2112 rows x 65536 B = 138,412,032 B in flight; 26,214,400 B of L2 half; the part
    # of the second read that misses: 268,435,456 x (138,412,032 - 26,214,400) / 138,412,032.
    in_flight, share, data = 2112 * 16384 * 4, 50 * 2**20 // 2, 4096 * 16384 * 4
    miss = data * (in_flight - share) // in_flight
    assert miss == 217_595_407
    assert torch_norm_bytes(4096, 16384, 4, "h100-sxm") == (2 * data + miss, miss)


def test_fewer_rows_than_blocks_in_flight():
    # 1024 rows (fewer than the 1728 blocks an A100 holds): all of them in flight, 1024 x 48 KiB = 48 MiB > 20 MiB.
    data = 1024 * 12288 * 4
    miss = data * (data - 20 * 2**20) // data
    assert torch_norm_bytes(1024, 12288, 4, "a100-sxm-80gb") == (2 * data + miss, miss)


def test_unknown_chip_reads_once():
    assert torch_norm_bytes(4096, 16384, 4, "mi300x") == (2 * 4096 * 16384 * 4, 0)
