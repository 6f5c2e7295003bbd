/// <reference path="../../../sandbox/tally.d.ts" />
// payout's follow-up when the provider paid (started by the outcome, never by a client): the void of
// the hold and the settled posting in one transaction, so the wallet never shows both or neither.

function run(event) {
  const { payout_id, account, amount, settle_id, provider_id } = event.data;
  graphql('mutation($id: UUID!) { voidTransaction(id: $id) { transactionId } }', { id: payout_id });
  graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', {
    i: { transactionId: settle_id, tranCode: 'PAYOUT', params: { account, amount, payout_id, provider_id } },
  });
  return { payout_id, settled: settle_id, provider_id };
}
