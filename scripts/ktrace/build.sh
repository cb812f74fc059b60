#!/bin/bash
# Builds scripts/ktrace/libktrace.so on the GPU machine (gcc and the CUDA
# toolkit's CUPTI headers and library, found under /usr/local/cuda*), with
# the newest kernel record struct the header declares.
set -e
dir=$(cd "$(dirname "$0")" && pwd)
inc=$(dirname "$(find /usr/local/cuda*/ -name cupti.h 2>/dev/null | head -1)")
lib=$(dirname "$(find /usr/local/cuda*/ -name 'libcupti.so' 2>/dev/null | head -1)")
if [ "$inc" = . ] || [ "$lib" = . ]; then
	echo "ktrace: no CUPTI (cupti.h, libcupti.so) under /usr/local/cuda*" >&2
	exit 1
fi
for v in 11 10 9 8 7; do
	if gcc -O2 -shared -fPIC -DKT=CUpti_ActivityKernel$v -I"$inc" -o "$dir/libktrace.so" "$dir/inj.c" \
		-L"$lib" -lcupti -Wl,-rpath,"$lib" -lpthread 2>/dev/null; then
		echo "ktrace: built $dir/libktrace.so (CUpti_ActivityKernel$v)"
		exit 0
	fi
done
echo "ktrace: no CUpti_ActivityKernel7..11 in $inc/cupti_activity.h" >&2
exit 1
