package dictionary

// writeBlock writes e.tokens as one block, fixed or dynamic, and empties
// them.
func (e *encoder) writeBlock(final bool) {
	var bfinal uint32
	if final {
		bfinal = 1
	}
	defer func() { e.tokens = e.tokens[:0] }()
	if len(e.tokens) < fixedOnlyTokens {
		e.writeFixed(bfinal)
		return
	}
	clear(e.litF[:])
	clear(e.distF[:])
	var extra int
	for _, t := range e.tokens {
		if t&matchFlag == 0 {
			e.litF[t]++
			continue
		}
		lc := lengthCode[(t>>15&0xff)+3]
		dc := distCode(int(t&0x7fff) + 1)
		e.litF[257+int(lc)]++
		e.distF[dc]++
		extra += int(lengthExtra[lc]) + int(distExtra[dc])
	}
	e.litF[endOfBlock] = 1

	fixedBits := 3 + extra
	for s, f := range e.litF {
		fixedBits += int(f) * int(fixedLitBits[s])
	}
	for _, f := range e.distF {
		fixedBits += int(f) * 5
	}

	dynBits := 3 + extra + e.buildDynamic()
	for s, f := range e.litF {
		dynBits += int(f) * int(e.litL[s])
	}
	for s, f := range e.distF {
		dynBits += int(f) * int(e.distL[s])
	}
	if fixedBits <= dynBits {
		e.writeFixed(bfinal)
		return
	}
	e.writeDynamic(bfinal)
}

// writeFixed writes the block with the fixed codes of RFC 1951 §3.2.6.
func (e *encoder) writeFixed(bfinal uint32) {
	// §3.2.3: BFINAL, then BTYPE 01 "compressed with fixed Huffman codes".
	e.w.write(bfinal|1<<1, 3)
	e.writeTokens(&fixedLit, &fixedDist)
}

func (e *encoder) writeTokens(lit *[288]hcode, dist *[32]hcode) {
	w := &e.w
	for _, t := range e.tokens {
		if t&matchFlag == 0 {
			w.writeCode(lit[t])
			continue
		}
		length := int(t>>15&0xff) + 3
		d := int(t&0x7fff) + 1
		lc := lengthCode[length]
		w.writeCode(lit[257+int(lc)])
		if n := lengthExtra[lc]; n > 0 {
			w.write(uint32(length-int(lengthBase[lc])), uint(n))
		}
		dc := distCode(d)
		w.writeCode(dist[dc])
		if n := distExtra[dc]; n > 0 {
			w.write(uint32(d-int(distBase[dc])), uint(n))
		}
	}
	w.writeCode(lit[endOfBlock])
}

// buildDynamic builds the codes of a dynamic block from e.litF and e.distF
// and the run-length coded code lengths of its header (RFC 1951 §3.2.7),
// and returns the header's size in bits after BFINAL and BTYPE.
func (e *encoder) buildDynamic() int {
	e.huff.buildLengths(e.litF[:], e.litL[:], maxCodeBits)
	e.huff.buildLengths(e.distF[:], e.distL[:], maxCodeBits)
	if e.distL == [numDist]uint8{} {
		// §3.2.7: "One distance code of zero bits means that there are no
		// distance codes used at all"; inflaters differ on accepting an
		// empty code, so give two unused codes one bit each instead.
		e.distL[0], e.distL[1] = 1, 1
	}
	nlit := numLitLen
	for nlit > 257 && e.litL[nlit-1] == 0 {
		nlit--
	}
	ndist := numDist
	for ndist > 1 && e.distL[ndist-1] == 0 {
		ndist--
	}

	// Run-length code the lengths of both alphabets as one sequence, which
	// §3.2.7 allows: "code lengths form a single sequence of HLIT + HDIST +
	// 258 values". Each element is symbol | extra<<5.
	e.clSeq = e.clSeq[:0]
	var all [numLitLen + numDist]uint8
	n := copy(all[:], e.litL[:nlit])
	n += copy(all[n:], e.distL[:ndist])
	seq := all[:n]
	for i := 0; i < len(seq); {
		l := seq[i]
		run := 1
		for i+run < len(seq) && seq[i+run] == l {
			run++
		}
		i += run
		if l == 0 {
			for run >= 11 {
				r := min(run, 138)
				e.clSeq = append(e.clSeq, 18|uint16(r-11)<<5)
				run -= r
			}
			if run >= 3 {
				e.clSeq = append(e.clSeq, 17|uint16(run-3)<<5)
				run = 0
			}
		} else {
			e.clSeq = append(e.clSeq, uint16(l))
			run--
			for run >= 3 {
				r := min(run, 6)
				e.clSeq = append(e.clSeq, 16|uint16(r-3)<<5)
				run -= r
			}
		}
		for ; run > 0; run-- {
			e.clSeq = append(e.clSeq, uint16(l))
		}
	}
	clear(e.clF[:])
	for _, c := range e.clSeq {
		e.clF[c&31]++
	}
	e.huff.buildLengths(e.clF[:], e.clL[:], maxCLBits)
	nclen := numCodeLen
	for nclen > 4 && e.clL[codeLenOrder[nclen-1]] == 0 {
		nclen--
	}
	bits := 5 + 5 + 4 + 3*nclen
	for _, c := range e.clSeq {
		sym := c & 31
		bits += int(e.clL[sym]) + int(clExtraBits(sym))
	}
	e.hlit, e.hdist, e.hclen = nlit, ndist, nclen
	return bits
}

func clExtraBits(sym uint16) uint8 {
	switch sym {
	case 16:
		return 2
	case 17:
		return 3
	case 18:
		return 7
	}
	return 0
}

// writeDynamic writes the block with the codes buildDynamic made.
func (e *encoder) writeDynamic(bfinal uint32) {
	w := &e.w
	// §3.2.3: BTYPE 10, "compressed with dynamic Huffman codes".
	w.write(bfinal|2<<1, 3)
	w.write(uint32(e.hlit-257), 5)
	w.write(uint32(e.hdist-1), 5)
	w.write(uint32(e.hclen-4), 4)
	for _, sym := range codeLenOrder[:e.hclen] {
		w.write(uint32(e.clL[sym]), 3)
	}
	assignCodes(e.clL[:], e.clC[:])
	for _, c := range e.clSeq {
		sym := c & 31
		w.writeCode(e.clC[sym])
		if n := clExtraBits(sym); n > 0 {
			w.write(uint32(c>>5), uint(n))
		}
	}
	var lit [288]hcode
	var dist [32]hcode
	assignCodes(e.litL[:], lit[:numLitLen])
	assignCodes(e.distL[:], dist[:numDist])
	e.writeTokens(&lit, &dist)
}
