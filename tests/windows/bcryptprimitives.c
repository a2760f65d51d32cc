/* A stand-in for Windows' bcryptprimitives.dll in the wine prefix the
 * Windows tests run resmux.exe in: Rust's standard library (1.78 and later)
 * draws its random numbers from its ProcessPrng, which Debian 12's wine 8.0
 * lacks. Windows 10 and later ship the real one; this one is never
 * shipped. It draws from RtlGenRandom, which wine has. */
#include <windows.h>
#include <ntsecapi.h>

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T size) {
    while (size > 0) {
        ULONG chunk = size > 0x10000000 ? 0x10000000 : (ULONG)size;
        if (!RtlGenRandom(data, chunk)) {
            return FALSE;
        }
        data += chunk;
        size -= chunk;
    }
    return TRUE;
}
